"""docs/layout.md is the map of the code: each rule its "The rules" list states is checked here, so the map and
the code cannot drift apart."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "prompttune"
LAYOUT = (ROOT / "docs" / "layout.md").read_text()
RULES = LAYOUT[LAYOUT.index("## The rules"):]
MODULES = {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def _rule(number: int) -> str:
    """The text of one numbered rule."""
    return re.search(rf"^{number}\. (.*?)(?=^\d+\. |\Z)", RULES, re.M | re.S).group(1)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """Every import statement, at any depth: (module, the names taken from it; [] for `import module`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _reaches(module: str, names: list[str], target: str) -> bool:
    """Whether `from module import names` (or `import module`) imports `target` or a module inside it."""
    return any(m == target or m.startswith(target + ".") for m in (module, *(f"{module}.{n}" for n in names)))


def _importers(target: str) -> set[str]:
    return {_module_name(path) for path, tree in MODULES.items()
            if any(_reaches(module, names, target) for module, names in _imports(tree))}


def _map_layers() -> list[str]:
    """The layers in the map's text block, top to bottom, as module names."""
    block = LAYOUT.split("```text\n", 1)[1].split("```", 1)[0]
    return [f"prompttune.{line.split()[0].removesuffix('.py').removesuffix('/')}"
            for line in block.splitlines() if line and not line[0].isspace()]


def test_the_map_fits_one_screen() -> None:
    assert len(LAYOUT.splitlines()) <= 90


def test_rule_1_the_layers_contract_lists_the_maps_layers_in_its_order() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["type"] == "layers")["layers"]
    assert [layer for layer in layers if layer != "prompttune.__main__"] == _map_layers()
    top_level = {f"prompttune.{p.stem if p.is_file() else p.name}" for p in PACKAGE.iterdir()
                 if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").exists()}
    assert set(_map_layers()) == top_level  # every package and top-level module has its place in the map
    assert contracts["exclude_type_checking_imports"] is False
    assert {"type": "acyclic_siblings", "ancestors": ["prompttune"]}.items() <= next(
        c for c in contracts["contracts"] if c["type"] == "acyclic_siblings").items()


def test_rule_2_nothing_imports_commands_but_cli() -> None:
    assert "Nothing imports `commands` but `cli`" in _rule(2)
    assert {m for m in _importers("prompttune.commands") if not m.startswith("prompttune.commands")} == {"prompttune.cli"}


def test_rule_2_nothing_in_the_package_imports_the_test_devices() -> None:
    assert "nothing in the package imports `testing/`" in _rule(2)
    assert {m for m in _importers("prompttune.testing") if not m.startswith("prompttune.testing")} == set()


def test_rule_2_the_dspy_bridge_is_imported_outside_it_only_to_run_dspy() -> None:
    assert "(`require_dspy`, `dspy_bridge.program`), never for the registry" in _rule(2)
    for path, tree in MODULES.items():
        if _module_name(path).startswith("prompttune.dspy_bridge"):
            continue
        for module, names in _imports(tree):
            if _reaches(module, names, "prompttune.dspy_bridge"):
                assert module == "prompttune.dspy_bridge.program" or (
                    module == "prompttune.dspy_bridge" and names == ["require_dspy"]), (path, module, names)


def test_rule_3_no_file_is_over_its_line_limit() -> None:
    package_limit, optimizer_limit = map(int, re.search(
        r"No file under `prompttune/` is over (\d+) lines, none under `optimizers/` over (\d+)", _rule(3)).groups())
    lines = {path.relative_to(PACKAGE): len(path.read_text().splitlines()) for path in MODULES}
    assert {str(p): n for p, n in lines.items() if n > package_limit} == {}
    assert {str(p): n for p, n in lines.items() if p.parts[0] == "optimizers" and n > optimizer_limit} == {}


def test_rule_4_a_module_basename_repeats_only_for_one_feature_across_layers() -> None:
    one_feature = set(re.findall(r"`(\w+\.py)`", _rule(4)))
    repeated = {name for name, n in Counter(p.name for p in MODULES if p.name != "__init__.py").items() if n > 1}
    assert repeated == one_feature  # a name the map lists that no longer repeats is struck from the list too


def _words(name: str) -> tuple[str, ...]:
    """A class name's words, each without an -s, -ed or -ing ending (a stem of at least three letters kept)."""
    def stem(word: str) -> str:
        for ending in ("ing", "ed", "s"):
            if word.endswith(ending) and not word.endswith("ss") and len(word) - len(ending) >= 3:
                return word[:-len(ending)]
        return word
    return tuple(stem(w.lower()) for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+", name))


def test_rule_5_the_class_name_rule_tells_inflections_apart_from_other_names() -> None:
    assert _words("OpenRun") == _words("OpenedRun") and _words("Choice") == _words("Choices")
    assert _words("HeldModel") != _words("OpenedRun") and _words("Process") == ("process",)


def test_rule_5_class_names_are_unique_and_no_two_in_a_folder_differ_by_an_ending() -> None:
    assert "-s`, `-ed` or `-ing` ending" in _rule(5)
    classes = [(path.parent, node.name) for path, tree in MODULES.items() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef)]
    assert [name for name, n in Counter(name for _, name in classes).items() if n > 1] == []
    by_words: dict[tuple[Path, tuple[str, ...]], list[str]] = defaultdict(list)
    for folder, name in classes:
        by_words[folder, _words(name)].append(name)
    assert [names for names in by_words.values() if len(names) > 1] == []


NEW_STRATEGY = '''"""The baseline and one more candidate on the full dev split: a strategy written by docs/layout.md's row.

Example, on the synthetic oracle::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="pair", budget=600,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> len(run.trials.load()), run.ledger.calls
    (2, 240)
"""

from __future__ import annotations

from typing import Any

from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.strategy_contract import Optimizer, TrialRequest
from prompttune.search_spaces.space import Candidate


class PairSearch(Optimizer):
    """The baseline, then one distinct candidate, ranked by dev score."""

    name = "pair"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue = self.context.space.distinct_candidates(self.rng, 2, first=[self.baseline])
        self._scored: list[tuple[Candidate, float]] = []

    def ask(self) -> TrialRequest | None:
        if len(self._scored) >= len(self._queue):
            return None
        return TrialRequest(self._queue[len(self._scored)], tuple(self.context.dev_ids), "evaluate")

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        self._scored.append((request.candidate, self.context.score(records)))
        return {}

    def ranking(self) -> list[Candidate]:
        return rank_by_score(self._scored, self.baseline)

    def family(self) -> int:
        return len(self._scored)
'''

RUN_IT = """
import doctest, sys
import prompttune
from prompttune.optimizers import pair
from prompttune.testing import OracleProblem
assert doctest.testmod(pair).failed == 0
problem = OracleProblem.colours()
run = prompttune.optimize(problem.task, optimizer="pair", budget=600, space=problem.space, backend=problem.backend,
                          runs_dir=sys.argv[1])
print(len(run.trials.load()), run.verdict.summary() != "", "pair" in (run.run_dir / "report.md").read_text())
"""


def _edit(path: Path, anchor: str, replacement: str) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path.name} no longer holds {anchor!r}: update the map's optimizer row"
    path.write_text(text.replace(anchor, replacement))


def test_rule_6_a_new_optimizer_written_by_the_maps_row_alone_runs(tmp_path: Path) -> None:
    row = next(line for line in LAYOUT.splitlines() if line.startswith("| an optimizer |"))
    assert "one file in `optimizers/` with a subclass of `Optimizer`" in row
    assert "its class in `OPTIMIZERS` (`optimizers/__init__.py`)" in row
    assert "`Reach(...)`, under its name in `REACH` (`optimizers/registry.py`)" in row
    package = tmp_path / "prompttune"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "optimizers" / "pair.py").write_text(NEW_STRATEGY)
    _edit(package / "optimizers" / "__init__.py", "OPTIMIZERS: dict[str, type[Optimizer]] = {",
          "from prompttune.optimizers.pair import PairSearch\n\nOPTIMIZERS: dict[str, type[Optimizer]] = {")
    _edit(package / "optimizers" / "__init__.py", "for cls in (", "for cls in (PairSearch, ")
    _edit(package / "optimizers" / "registry.py", "REACH: dict[str, Reach] = {",
          'REACH: dict[str, Reach] = {\n    "pair": Reach(lists=True),')
    done = subprocess.run([sys.executable, "-c", RUN_IT, str(tmp_path / "runs")], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["2", "True", "True"]


def test_rule_7_every_file_the_map_names_exists() -> None:
    packaged = {p.relative_to(PACKAGE).as_posix() for p in MODULES}
    named = set(re.findall(r"[\w/]*\w\.py\b", LAYOUT))
    assert [name for name in sorted(named) if not (ROOT / name).exists() and not any(
        path == name or path.endswith("/" + name) for path in packaged)] == []


def test_rule_8_fewer_than_14_floors_and_no_circle_between_rooms() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "import_floors.py"), "--chain"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr  # a circle between rooms exits with its name
    floors, *chain = done.stdout.split()
    assert int(floors) == len(chain) < 14 and chain[-1] == "core", chain
