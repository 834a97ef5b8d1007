"""Errors that more than one layer raises, defined below all of them.

`ConfigError` is raised while the configuration is read and while each part of the
data path builds its read-only state from its own section of it (masking rules,
prompt registries, template directories, contributors); the commands turn it into
one line on stderr and exit status 2, never a traceback. It lives here, not beside
`WorkerConfig`, so that the families and the masking stage can raise it without
importing the configuration that imports them.
"""


class ConfigError(Exception):
    """The configuration file cannot be used; the message says which file and why."""
