"""Comparing: the baseline store, the verdict of each measured metric against it, and the
confirmation runs in fresh processes behind a failing verdict. No module here imports a hook
module or the fixture."""
