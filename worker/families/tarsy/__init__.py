"""The seed-000 (TARSy) prompt builder: pure functions from job data to message text.

Split by concern as the seed is: `instructions` (three-tier composition), `components`
(alert, runbook, chain-context sections), `tools` (JSON Schema -> text), `chat`,
`templates` (every constant) and `builder` (one entry point per kind).
"""
