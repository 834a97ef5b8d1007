"""Secret masking between the parsed job and the builder (docs/MASKING.md)."""
