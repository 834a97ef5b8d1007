"""One module per `prompt-worker` command."""
