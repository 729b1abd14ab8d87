"""`python -m mrjudge …` is `mrjudge …` (what `accelerate launch -m mrjudge` runs on every rank)."""

from mrjudge.cli import main

raise SystemExit(main())
