"""python -m pytest_hpml compare | show | seed (pytest_hpml.cli)."""

from pytest_hpml.cli import main

raise SystemExit(main())
