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

#: Whether the session's environment control has frozen the heap (environment.freeze_heap sets
#: it, unfreeze_heap clears it); gc.get_freeze_count() would tell by walking every frozen
#: object, 0.01-0.03 s a block with a 10 000-row sweep's records frozen.
heap_frozen = False


@contextlib.contextmanager
def collector_paused(pause: bool = True, freeze: bool = False) -> Iterator[None]:
    """The cyclic collector off for the block where `pause` (the benchmark fixture's
    disable_gc asks), and on again afterwards where it was on before: nested blocks, or a test
    that turned it off, keep theirs; a block that turned it off itself, where it was on, has it
    on again.

    `freeze`: where the heap is frozen already (the session's environment control froze it
    before the first test, environment.freeze_heap), what the block made joins it once the
    block is done (gc.freeze), rather than being walked by the collections that follow, none
    of which could free any of it: having made no garbage cycle, it lives as long as the run
    reads it (the run's verdicts), or is freed by its reference count (a save's merged rows,
    once written), which a frozen object still is; the session's end gives it all back to the
    collector. A 10 000-row compare spent 0.16 s collecting where its plain run spent 0.09 s,
    a save 0.12-0.14 s. Where the heap is not frozen (--hpml-env=keep, the command line's
    tools) the collector is left as it was."""
    enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
        if freeze and pause and heap_frozen:
            gc.freeze()  # not after a failure: its traceback holds frames, which make cycles
    finally:
        if enabled:
            gc.enable()
