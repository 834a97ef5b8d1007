"""Formatters that turn stored timeline events into context text.

They live beside the prompt builder, not in it (as in the seed): they turn events into
text, not prompts into messages.
"""
