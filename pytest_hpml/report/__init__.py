"""Presenting results: tables, files, CI dashboard exports and charts. Tests only record."""
