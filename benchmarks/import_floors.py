"""How many floors the package has: the longest chain of import-time imports between its rooms.

A room is a subpackage (`engine`, `scoring`, …) or a top-level module (`cli`, `api`, the package's own
`__init__`); each floor is a room that must be imported before the one above it can finish importing, so the
chain is what a change at the bottom ripples through (issue 55 asks for fewer than 14). `--modules` counts the
same chain between single modules instead. Imports made
at import time count (`if TYPE_CHECKING:` blocks included: they are dependencies of the layers too); imports
inside a function do not. `from a import b` is an edge to `a.b` when that is a module, else to `a`.

Run: python benchmarks/import_floors.py                     (the number of floors)
     python benchmarks/import_floors.py --chain             (and the chain itself, bottom last)
     python benchmarks/import_floors.py --modules --chain   (the same between modules)
"""

from __future__ import annotations

import argparse
import ast
import sys
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "prompttune"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_time_nodes(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: not those inside a function body."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def edges(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports at import time."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in import_time_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
        module = ".".join([*base, *([node.module] if node.module else [])])
        for alias in node.names:
            targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    return {target for target in targets if target in known and target != name}


def room(module: str) -> str:
    """The subpackage or top-level module a module belongs to (`prompttune` for the package's `__init__`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def longest_chain(by_room: bool = True) -> list[str]:
    """The longest import chain, top first, between rooms (or modules); an import cycle is an error."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        node = room(name) if by_room else name
        graph.setdefault(node, set()).update(room(t) if by_room else t for t in edges(name, path, known))
        graph[node].discard(node)
    visiting: set[str] = set()

    @cache
    def chain_from(name: str) -> tuple[str, ...]:
        if name in visiting:
            raise SystemExit(f"import cycle through {name}")
        visiting.add(name)
        below = max((chain_from(target) for target in sorted(graph[name])), key=len, default=())
        visiting.discard(name)
        return (name, *below)

    return list(max((chain_from(name) for name in sorted(graph)), key=len))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chain", action="store_true", help="print the chain too, one floor a line")
    parser.add_argument("--modules", action="store_true", help="count floors between modules, not rooms")
    args = parser.parse_args(argv)
    chain = longest_chain(by_room=not args.modules)
    print(len(chain))
    if args.chain:
        print("\n".join(chain))


if __name__ == "__main__":
    main(sys.argv[1:])
