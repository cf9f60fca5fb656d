"""The compare path stays in named steps short enough to read at once: no function or method in it is over 50
lines (from its `def` line to its last line, as `ast` counts them)."""

from __future__ import annotations

import ast
from pathlib import Path

import prompttune

PACKAGE = Path(prompttune.__file__).parent
COMPARE_PATH = [*(PACKAGE / "engine" / name for name in (
    "comparison.py", "compare_request.py", "compare_steps.py", "arm_executors.py", "arm_runs.py", "workers.py",
    "ray_executor.py")), *sorted((PACKAGE / "comparing").glob("*.py"))]
LONGEST = 50


def function_lengths(source: str) -> dict[str, int]:
    """Every function's and method's length in lines (`end_lineno - lineno + 1`), by name and first line."""
    return {f"{node.name} (line {node.lineno})": node.end_lineno - node.lineno + 1
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None}


def test_function_lengths_are_counted_from_def_to_last_line() -> None:
    source = "def short():\n    return 1\n\n\nclass Holder:\n    async def long(self):\n" + "        pass\n" * 51
    assert function_lengths(source) == {"short (line 1)": 2, "long (line 6)": 52}


def test_no_function_in_the_compare_path_is_over_50_lines() -> None:
    assert all(path.is_file() for path in COMPARE_PATH)
    too_long = {f"{path.relative_to(PACKAGE)}: {name}": length for path in COMPARE_PATH
                for name, length in function_lengths(path.read_text(encoding="utf-8")).items() if length > LONGEST}
    assert not too_long, too_long
