"""An output named as a special file (issue 31 item 13): /dev/stdout or a FIFO was replaced by
a regular file (pytest's own output lost, the FIFO's reader waiting forever); it is refused
before the tests run, saying what to give."""

from __future__ import annotations

import os

import pytest
from hpml_testing import FAST

REFUSED = ("cannot write there: it is not a regular file (a terminal, a pipe, a FIFO or a "
           "device); give a file name and read the file afterwards")


@pytest.mark.parametrize("option", ["--hpml-export-bencher", "--hpml-report"])
def test_a_fifo_is_refused_and_left_a_fifo(pytester: pytest.Pytester, option: str) -> None:
    fifo = pytester.path / "out.json"
    os.mkfifo(fifo)
    pytester.makepyfile("def test_x():\n    raise SystemExit('must not run')\n")
    result = pytester.runpytest(*FAST, f"{option}={fifo}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {option}={fifo}: {REFUSED}" in result.stderr.str()
    assert fifo.is_fifo()


def test_dev_stdout_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    raise SystemExit('must not run')\n")
    result = pytester.runpytest(*FAST, "--hpml-export-bencher=/dev/stdout")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --hpml-export-bencher=/dev/stdout: {REFUSED}" in result.stderr.str()
