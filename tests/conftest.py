"""The plugin's own tests drive inner pytest runs through pytester.

Inner runs load pytest-hpml through its pytest11 entry point, like any user's run. Helpers
shared by the test files live in hpml_testing.py.
"""

pytest_plugins = ["pytester"]
