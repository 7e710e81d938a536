"""Imported by example_model.py as a sibling module (`import example_helper`), as a user's
script imports its own files: the CLI must run scripts with their folder on sys.path."""

SHIFT = 1.0
