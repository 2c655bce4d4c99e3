"""`python -m pytest_hpml show | compare` on files that are JSON but no report (issue 31 item
10): one line naming the file and what it holds, exit 2, no traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pytest_hpml.cli import main

NOT_A_REPORT = {"list": ("[1, 2]", "(it holds a JSON list)"),
                "string": ('"runs"', "(it holds a JSON str)"),
                "null": ("null", "(it holds a JSON NoneType)")}


@pytest.mark.parametrize("command", ["show", "compare"])
@pytest.mark.parametrize("kind", list(NOT_A_REPORT))
def test_json_that_is_no_object_is_named_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str) -> None:
    text, said = NOT_A_REPORT[kind]
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    other = tmp_path / "other.json"
    other.write_text('{"records": []}', encoding="utf-8")
    argv = [command, str(path)] + ([str(other)] if command == "compare" else [])
    assert main(argv, io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path} is neither a pytest-hpml ")
    assert said in err


@pytest.mark.parametrize("records, said", [
    ('[{"metrics": [{"value": 1}]}]', "a record or metric lacks 'id'"),
    ("[1]", "a record or metric is not an object"),
])
def test_show_on_a_damaged_report_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           records: str, said: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(f'{{"records": {records}}}', encoding="utf-8")
    assert main(["show", str(path)], io.StringIO()) == 2
    assert capsys.readouterr().err == (f"error: {path} is a damaged pytest-hpml report: {said}; "
                                       "write it again with --hpml-report\n")
