"""The architecture, enforced on the source (AST): one-way layers, no cycles, no private
imports.

* Every import counts: at module level, inside functions, and under
  ``if TYPE_CHECKING:`` (an annotation names what a module depends on as much as a call
  does, and a cycle through annotations is still a cycle in the design).
* :data:`LAYERS` lists the layers, lowest first; each holds units (a module, or a package
  and everything under it); every unit holds at least one module, so a name left behind
  by a move fails instead of placing nothing. A module imports its own layer's modules
  and lower layers' only, so the core never imports adapters or the composition roots,
  and a policy never imports the core that drives it.
* No import cycle between hpsearch's modules, and none between the units of
  :data:`LAYERS` (``money -> pruning -> money`` is a cycle even when no module is on one).
* No private name (``_x``) is imported from another module.

Each rule's checker is also run on a small synthetic case that breaks it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hpsearch"
PACKAGE = "hpsearch"

#: The layers, lowest first. A unit is a module or a package (and all below it);
#: ``hpsearch`` itself is only the package's ``__init__``.
LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: shared vocabulary that imports nothing above it
    ("hpsearch.errors", "hpsearch.keys", "hpsearch.scalars", "hpsearch.version",
     "hpsearch.trials"),
    # what the user wrote: space.yaml, its keys and their vocabulary
    ("hpsearch.spec",),
    # pure domains the core uses
    ("hpsearch.money", "hpsearch.pruning", "hpsearch.recovery", "hpsearch.model"),
    # every trial's life and every decision about it
    ("hpsearch.core",),
    # readers and drivers of the core that need no real backend
    ("hpsearch.report", "hpsearch.simulate"),
    # Ray, Optuna, Lightning, NVML, the operating system
    ("hpsearch.adapters",),
    # composition roots and user code (the examples are trainables run by name)
    ("hpsearch.driver", "hpsearch.tools", "hpsearch.cli", "hpsearch", "hpsearch.__main__",
     "hpsearch.examples"),
)


class Import(NamedTuple):
    """One import of an hpsearch module: what it names and where."""

    target: str
    names: tuple[str, ...]
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_in(source: str, name: str, is_package: bool,
               modules: Iterable[str] = MODULES) -> tuple[Import, ...]:
    """Every hpsearch import in ``source`` (module ``name``): at module level, inside
    functions and under ``if TYPE_CHECKING:`` alike."""
    modules = set(modules)
    package = name if is_package else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(a.name, (), node.lineno) for a in node.names
                    if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if base.split(".")[0] != PACKAGE:
                continue
            names = tuple(a.name for a in node.names)
            # ``from hpsearch.money import ledger`` imports the module hpsearch.money.ledger
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            others = tuple(n for n in names if f"{base}.{n}" not in modules)
            if others:
                out.append(Import(base, others, node.lineno))
            out += [Import(m, (), node.lineno) for m in submodules]
    return tuple(out)


@functools.cache  # every test walks the same sources: parse each module once
def imports(name: str) -> tuple[Import, ...]:
    path = MODULES[name]
    return imports_in(path.read_text(), name, path.name == "__init__.py")


def resolve(target: str, modules: Iterable[str] = MODULES) -> str | None:
    """The module an import of ``target`` loads (a name in a module: that module)."""
    modules = set(modules)
    while target not in modules and "." in target:
        target = target.rpartition(".")[0]
    return target if target in modules else None


def graph_of(found: Mapping[str, Iterable[Import]],
             modules: Iterable[str] = MODULES) -> dict[str, set[str]]:
    """Module -> the other modules it imports."""
    graph = {}
    for name, found_imports in found.items():
        targets = {resolve(i.target, modules) for i in found_imports}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


@functools.cache
def _graph() -> dict[str, set[str]]:
    return graph_of({name: imports(name) for name in MODULES})


def holds(unit: str, module: str) -> bool:
    """Whether ``unit`` holds ``module``: it is the module, or a package above it
    (``hpsearch`` itself holds only its ``__init__``)."""
    return module == unit or (unit != PACKAGE and module.startswith(unit + "."))


def unit_of(module: str) -> tuple[int, str] | None:
    """``(layer index, unit)`` of a module (the longest unit that holds it), or None."""
    best = None
    for index, layer in enumerate(LAYERS):
        for unit in layer:
            if holds(unit, module) and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    return best


def unmatched_units(layers: Iterable[Iterable[str]] = LAYERS,
                    modules: Iterable[str] = MODULES) -> list[str]:
    """The units of ``layers`` that hold no module: a name left behind by a move, which
    would otherwise place nothing and hide that the layers no longer say where it went."""
    modules = set(modules)
    return [unit for layer in layers for unit in layer
            if not any(holds(unit, m) for m in modules)]


def wrong_way(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """``(module, target)`` of every import of a higher layer than the module's own."""
    bad = []
    for name, targets in graph.items():
        for target in targets:
            # a module of no layer is test_every_module_has_a_layer's to report
            if unit_of(name) and unit_of(target) and unit_of(target)[0] > unit_of(name)[0]:
                bad.append((name, target))
    return sorted(bad)


def unit_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Unit -> the other units its modules import (a module of no layer is its own
    unit)."""
    def unit(module: str) -> str:
        return unit_of(module)[1] if unit_of(module) else module

    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        out.setdefault(unit(name), set()).update(unit(t) for t in targets)
        out[unit(name)].discard(unit(name))
    return out


def _cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle (a list of nodes, the first repeated last) if there is any."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
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


def private_imports(found: Mapping[str, Iterable[Import]],
                    modules: Iterable[str] = MODULES) -> list[tuple[str, str, str, int]]:
    """``(module, target, name, line)`` of every private name imported from another
    module."""
    return [(name, i.target, n, i.line) for name, found_imports in found.items()
            for i in found_imports for n in i.names
            if n.startswith("_") and not n.startswith("__")
            and resolve(i.target, modules) != name]


# ---------------------------------------------------------------------------------------
# The rules, on hpsearch.


def test_the_walk_sees_every_package():
    assert {"hpsearch.core.search", "hpsearch.money.ledger", "hpsearch.adapters.ray.tune",
            "hpsearch.pruning.cost_aware", "hpsearch.trials", "hpsearch",
            "hpsearch.__main__"} <= set(MODULES)


def test_every_module_has_a_layer():
    assert [m for m in MODULES if unit_of(m) is None] == []
    units = [u for layer in LAYERS for u in layer]
    assert len(units) == len(set(units)), "a unit is in two layers"


def test_every_unit_holds_a_module():
    assert unmatched_units() == [], "units of LAYERS that hold no module (moved?)"


def test_imports_go_down_the_layers():
    bad = [(name, target, [i.line for i in imports(name) if resolve(i.target) == target])
           for name, target in wrong_way(_graph())]
    assert not bad, "imports of a higher layer (module, target, lines): " + repr(bad)


def test_there_is_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_there_is_no_cycle_between_units():
    assert _cycle(unit_graph(_graph())) is None, " -> ".join(_cycle(unit_graph(_graph())))


def test_no_private_name_is_imported_from_another_module():
    bad = private_imports({name: imports(name) for name in MODULES})
    assert not bad, bad


# ---------------------------------------------------------------------------------------
# Each checker, on a case that breaks its rule.


def test_the_walk_counts_type_checking_and_function_imports():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import hpsearch.errors\n"
        "from . import config\n"
        "if TYPE_CHECKING:\n"
        "    from hpsearch.money.budget import Accountant\n"
        "def f():\n"
        "    from hpsearch.recovery import oom\n"
        "    from .config import _check_pruning\n")
    found = imports_in(source, "hpsearch.spec.space", is_package=False)
    assert {(i.target, i.names) for i in found} == {
        ("hpsearch.errors", ()), ("hpsearch.spec.config", ()),
        ("hpsearch.money.budget", ("Accountant",)), ("hpsearch.recovery.oom", ()),
        ("hpsearch.spec.config", ("_check_pruning",))}


def test_the_layer_check_finds_an_upward_import():
    modules = ["hpsearch.spec.config", "hpsearch.pruning.cost_aware", "hpsearch.money.budget",
               "hpsearch.core.lifecycle", "hpsearch.trials"]
    found = {
        "hpsearch.spec.config": [Import("hpsearch.pruning.cost_aware", ("FINISH_SHARE",), 9)],
        "hpsearch.pruning.cost_aware": [Import("hpsearch.core.lifecycle", ("TrialState",), 3),
                                        Import("hpsearch.money.budget", ("Accountant",), 4),
                                        Import("hpsearch.trials", ("TrialHistory",), 5)],
        "hpsearch.money.budget": [], "hpsearch.core.lifecycle": [], "hpsearch.trials": [],
    }
    assert wrong_way(graph_of(found, modules)) == [
        ("hpsearch.pruning.cost_aware", "hpsearch.core.lifecycle"),
        ("hpsearch.spec.config", "hpsearch.pruning.cost_aware")]
    # Down and sideways (money and pruning share a layer) are allowed.
    assert wrong_way({"hpsearch.pruning.none": {"hpsearch.money.budget", "hpsearch.spec.config",
                                                "hpsearch.trials"}}) == []
    assert unit_of("hpsearch.nowhere.x") is None
    assert unit_of("hpsearch.adapters.ray.tune") == (5, "hpsearch.adapters")
    assert unit_of("hpsearch.driver.session") == (6, "hpsearch.driver")


def test_the_unit_check_finds_a_unit_that_holds_no_module():
    modules = ["hpsearch", "hpsearch.driver", "hpsearch.driver.checkpoints",
               "hpsearch.money.ledger", "hpsearch.moneyed"]
    layers = (("hpsearch.money", "hpsearch.checkpoints"),
              ("hpsearch.driver", "hpsearch", "hpsearch.mon", "hpsearch.__main__"))
    # "hpsearch.mon" holds nothing ("hpsearch.moneyed" is not under it); "hpsearch" holds
    # only the package itself.
    assert unmatched_units(layers, modules) == [
        "hpsearch.checkpoints", "hpsearch.mon", "hpsearch.__main__"]
    assert unmatched_units((("hpsearch",),), ["hpsearch.cli"]) == ["hpsearch"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_unit_check_finds_a_cycle_no_module_is_on():
    graph = {"hpsearch.money.budget": {"hpsearch.pruning.decisions"},
             "hpsearch.pruning.decisions": set(),
             "hpsearch.pruning.cost_aware": {"hpsearch.money.ledger"},
             "hpsearch.money.ledger": set()}
    assert _cycle(graph) is None
    assert _cycle(unit_graph(graph)) == ["hpsearch.money", "hpsearch.pruning", "hpsearch.money"]


def test_the_private_check_finds_a_private_import():
    found = {"hpsearch.spec.config": [Import("hpsearch.recovery.storage", ("_scheme",), 7),
                                      Import("hpsearch.spec.config", ("_key",), 8),
                                      Import("hpsearch.version", ("__version__",), 9)]}
    assert private_imports(found) == [
        ("hpsearch.spec.config", "hpsearch.recovery.storage", "_scheme", 7)]
