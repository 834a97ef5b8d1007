"""Corpora of synthetic secrets and benign operations text for the masking tests."""
