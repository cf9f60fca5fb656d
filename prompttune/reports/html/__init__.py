"""The pieces of report.html: the page frame, one page per command, and the facts a run writes for them."""
