"""python -m pytest_hpml compare | show | seed (pytest_hpml.cli)."""

import os
import sys

from pytest_hpml.cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # A reader that stopped early (| head): no traceback, and no second error at exit.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
raise SystemExit(code)
