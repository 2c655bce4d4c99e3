"""Text from a test (ids, params, experiment names) escaped for the medium that shows it:
a terminal acts on control characters, a Markdown table on `|` and line breaks."""

from __future__ import annotations

import re
from typing import Any

#: Control characters a terminal would act on (ESC starts a colour or a cursor move, CR
#: overwrites the line); a newline is kept: tabulate lays out a cell of several lines.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def for_terminal(text: Any) -> str:
    """Text from a test (an id, a param, an experiment's name) as a terminal shows it: control
    characters written as Python escapes (\\x1b, \\r)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def for_markdown(text: Any, cell: bool = True) -> str:
    """Text in a Markdown table cell (a `|` would start a new cell, a newline end the row) or,
    with cell=False, in a heading or a list item (a newline would start a block of its own)."""
    text = for_terminal(text)
    if cell:
        return text.replace("|", "\\|").replace("\n", "<br>")
    return text.replace("\n", " ")
