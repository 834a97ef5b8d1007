"""Secret masking between the parsed job and the builder (issue 7, SPEC.md §9)."""
