"""The architecture, enforced on the source (AST): layers, no cycles, no private imports.

* The core packages (``spec``, ``money``, ``pruning``, ``model``, ``core``, ``recovery``, ``report``,
  the shared leaves and the simulator) never import ``hpsearch.adapters``, the driver,
  the CLI or the tools, at module level or inside functions.
* Adapters never import the driver, the CLI or the tools: only the composition roots
  (``driver``, ``cli``, and the ``tools`` behind their commands) wire adapters.
* No import cycles between hpsearch's modules (imports inside functions included; those
  under ``if TYPE_CHECKING:``, for annotations only, are not imports at run time).
* No private name (``_x``) is imported from another module.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hpsearch"

CORE = ("hpsearch.spec", "hpsearch.money", "hpsearch.pruning", "hpsearch.model", "hpsearch.core",
        "hpsearch.recovery", "hpsearch.report", "hpsearch.errors", "hpsearch.keys",
        "hpsearch.scalars", "hpsearch.simulate")
ROOTS = ("hpsearch.driver", "hpsearch.cli", "hpsearch.tools", "hpsearch.__main__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


@functools.cache  # every test walks the same sources: parse each module once
def imports(name: str) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """``(imported module, names imported from it, line)`` of every hpsearch import."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for n in ast.walk(block)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # annotations only: no import at run time
        if isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names
                    if a.name.split(".")[0] == "hpsearch"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if base.split(".")[0] != "hpsearch":
                continue
            names = tuple(a.name for a in node.names)
            # ``from hpsearch.money import ledger`` imports the module hpsearch.money.ledger
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            others = tuple(n for n in names if f"{base}.{n}" not in MODULES)
            if others:
                out.append((base, others, node.lineno))
            out += [(m, (), node.lineno) for m in submodules]
    return tuple(out)


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_walk_sees_every_package():
    assert {"hpsearch.core.search", "hpsearch.money.ledger", "hpsearch.adapters.ray.tune",
            "hpsearch.pruning.cost_aware", "hpsearch.driver"} <= set(MODULES)


@pytest.mark.parametrize("name", [m for m in MODULES if under(m, CORE)])
def test_core_modules_never_import_adapters_or_roots(name):
    bad = [(target, line) for target, _, line in imports(name)
           if under(target, ("hpsearch.adapters", *ROOTS))]
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", [m for m in MODULES if under(m, ("hpsearch.adapters",))])
def test_adapters_never_import_the_composition_roots(name):
    bad = [(target, line) for target, _, line in imports(name) if under(target, ROOTS)]
    assert not bad, f"{name} imports {bad}"


def test_no_private_name_is_imported_from_another_module():
    bad = [(name, target, n, line) for name in MODULES
           for target, names, line in imports(name) for n in names
           if n.startswith("_") and not n.startswith("__") and target != name]
    assert not bad, bad


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        targets = set()
        for target, _, _ in imports(name):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules) if there is any."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # A package's __init__ importing nothing is not a dependency of its modules.
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_there_is_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
