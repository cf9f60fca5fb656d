"""What a run leaves for people: report.md, report.html and the summary tables, built from the
engine's result types (`prompttune.engine`) or from a run directory's files alone."""


def ci_text(ci: tuple[float, float]) -> str:
    """A 95% interval as every report prints it."""
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
