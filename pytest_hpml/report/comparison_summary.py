"""The short Markdown of a comparison (--hpml-summary): what a pull-request comment or a CI
job summary should say and nothing else: a headline, the verdict lines (regressed, missing,
improved, ambiguous), the blind spots and the levels a save started. The full tables and every
verdict's reason stay in the report (--hpml-report)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pytest_hpml.report import verdict_lines
from pytest_hpml.report.escaping import for_markdown
from pytest_hpml.report.files import write_atomic
from pytest_hpml.results import Record

#: The outcomes a headline counts, worst first.
COUNTED = ("regressed", "missing", "improved", "ambiguous", "unchanged", "new")


def _item(text: str) -> str:
    """One Markdown list item: a line break in an id or a reason must not end it."""
    return "- " + for_markdown(text, cell=False)


def headline(records: list[Record], title: str | None) -> str:
    outcomes = Counter(v.outcome for r in records for v in r.verdicts.values())
    if not title:
        return f"No comparison: {len(records)} row(s) measured."
    counts = ", ".join(f"{outcomes[o]} {o}" for o in COUNTED if outcomes[o])
    failed = outcomes["regressed"] + outcomes["missing"]
    status = f"**{failed} metric(s) failed**" if failed else "**no regression**"
    return f"{title}: {status} ({counts or 'nothing judged'})."


def render_summary(records: list[Record], title: str | None, new_levels: list[str]) -> str:
    lines = ["## pytest-hpml", "", headline(records, title)]
    sections = (("Verdicts", verdict_lines.verdict_lines(records)),
                ("Blind spots", verdict_lines.blind_spot_lines(records)),
                ("New levels (this save)", new_levels))
    for name, items in sections:
        if items:
            lines += ["", f"### {name}", "", *(_item(i) for i in items)]
    return "\n".join(lines) + "\n"


def write_summary(path: Path, records: list[Record], title: str | None,
                  new_levels: list[str]) -> Path:
    text = render_summary(records, title, new_levels)
    return write_atomic(path, lambda f: f.write(text))
