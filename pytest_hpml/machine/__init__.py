"""The machine: its GPUs and how they were found, its fingerprint (the baseline key), and the
process's one forkserver. No module here imports a hook module or the fixture."""
