"""Exporting a finished run's shipped prompt: the writers (writers.py) and the standalone classifier they
write for `--to python` (served_classifier.py, with served_helpers.py copied into it)."""
