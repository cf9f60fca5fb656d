"""One module pair per command: `<command>.py` runs it and registers its parser (`add_parser`),
`<command>_report.py` (or `_formats.py`) says what it found. `common.py` holds the set-up and
options every command shares."""
