"""The compare stage: one engine (engine.py) judges every metric, whatever the evidence is (the
stored baseline, processes at a git ref measured now, a second report file), with one set of
rules (verdicts.py, noise.py, modes.py), and says what would narrow a blind spot in the options
of each path (advice.py). Around it: the baseline store (baselines.py, its stored metric
stored.py, how a save extends it history.py and with which fresh processes save_plan.py, where
each save came from provenance.py), the rows a run did not make (suite.py), a git ref's
worktree (reference.py), results files for tools (results_files.py) and pytest-benchmark runs
(seed.py). No module here imports a hook module or the fixture: running pytest again belongs to
pytest_hpml.rerun, the hook modules adapt the engine to a run."""
