from worker.cli import main

# Guarded so that a `spawn`ed process importing this module does not run the CLI.
if __name__ == "__main__":
    raise SystemExit(main())
