from worker.cli import main

raise SystemExit(main())
