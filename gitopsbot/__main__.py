"""`python -m gitopsbot` runs the command line."""

from gitopsbot.cli import main

raise SystemExit(main())
