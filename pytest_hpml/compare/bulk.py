"""Bookkeeping of many rows at once (reading, judging and writing a baseline of a 10 000-row
sweep) with Python's cyclic garbage collector paused.

Such work builds hundreds of thousands of objects that all live on (the rows, their metrics,
their verdicts) and makes no garbage cycles; the collector, counting them as they are made,
walked the whole heap again and again meanwhile: eleven full collections, 0.41-0.43 s of a
10 000-row save (0.14 s in a plain run of the same test). Paused, it collects once the work is
done, where anything made is garbage or not.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic collector off for the block where `pause` (the benchmark fixture's
    disable_gc asks), and on again afterwards where it was on before: nested blocks, or a test
    that turned it off, keep theirs; a block that turned it off itself, where it was on, has it
    on again."""
    enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
