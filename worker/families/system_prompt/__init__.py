"""The `system_prompt` kind: tiered system prompts (seed 003)."""
