"""Imported last by the forkserver (machine/forkserver.py), after everything it preloads: it
moves the objects those imports made into the collector's permanent generation (gc.freeze), so
that a process forked from the server never walks them again. pytest collects garbage at the
end of every session (its unraisable-exception plugin), and that walk over torch's objects took
0.25 s of every fresh process here (of about 1.1 s each); a walk also writes to every object's
header, which copies the server's shared pages into the child one by one."""

import gc

gc.collect()
gc.freeze()
