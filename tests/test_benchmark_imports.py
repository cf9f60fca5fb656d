"""Benchmarks import nothing from tests/: what they share with the suite (the oracle, the colour tasks, the
fake and llama.cpp servers) lives in `prompttune.testing`, so a benchmark never depends on the suite's layout."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (imports inside functions included)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
    return modules


def test_no_benchmark_imports_from_tests() -> None:
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert scripts, f"no benchmarks found in {BENCHMARKS}"
    offenders = {path.name: sorted(m for m in imported_modules(path) if m == "tests" or m.startswith("tests."))
                 for path in scripts}
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_the_rule_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text("def main():\n    from tests.support import oracle_for\n")
    assert imported_modules(script) == {"tests.support"}
