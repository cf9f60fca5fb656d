"""Which code made a run: each start or resume appends a line to the run directory's `code.jsonl`.

A comparison resumed after a fix mixes arm-seeds made by different code; the report's "code per arm"
then comes from the run directory itself, not from memory of what was checked out when.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import subprocess
from pathlib import Path
from typing import Any

from prompttune.core.run_files import CODE


def _git(source: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git, or a hung one: the version alone is recorded
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_provenance() -> dict[str, Any]:
    """The package version, where it was imported from and, in a git checkout, its commit and whether
    the package's tracked files differ from it (`dirty`); None where git cannot tell."""
    source = Path(__file__).resolve().parent.parent  # the imported package, not the working directory
    commit = _git(source, "rev-parse", "HEAD")
    status = _git(source, "status", "--porcelain", "--untracked-files=no", "--", ".") if commit else None
    return {"version": importlib.metadata.version("prompttune"), "source": str(source), "commit": commit,
            "dirty": None if status is None else bool(status)}


def record_code(run_dir: Path) -> None:
    """Append this process's code provenance, stamped with the time, to `run_dir/code.jsonl`."""
    line = {"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **code_provenance()}
    with open(Path(run_dir) / CODE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
