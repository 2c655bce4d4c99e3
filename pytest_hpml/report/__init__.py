"""Presenting: tables, report files, dashboard exports, charts and units. Tests only record.
No module here imports a hook module or the fixture."""
