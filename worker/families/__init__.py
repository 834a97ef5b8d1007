"""Prompt families beside the seed-000 builder (`worker.prompt`): legacy, skill, system_prompt."""
