"""``python -m agentic_rl.cli ARGS`` runs the ``agentic-rl`` command line."""

from agentic_rl.cli.main import main

raise SystemExit(main())
