"""portkern's own import graph: no cycle, and no room imports a room above it (the layers of
docs/ARCHITECTURE.md).

The graph is built from the source with ``ast``: every import statement, at module level and inside
functions alike, so an import moved into a function to dodge a cycle is still an edge. Importing ``a.b.c``
runs ``a/b/__init__.py`` first, so an edge to a module is also an edge to each package around it, except
the packages around the importing module itself (those are already being imported when it runs).
Imports under ``if TYPE_CHECKING:`` never run, but they are edges too: two modules that name each other's
types for the type checker are one design in two files (move the shared type to a lower module, or name what
is needed with a ``typing.Protocol``), and a type checker follows the circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import portkern

PKG = Path(portkern.__file__).resolve().parent
#: Rooms from the top down: a module may import its own room and the rooms below it, never one above.
#: Modules in no room (private plumbing such as _kernels, tuning, runs, identity) are held to no layer
#: here, but they are in the cycle check.
LAYERS = (
    ("portkern.cli",),
    ("portkern.portability",),
    ("portkern.train",),
    ("portkern.gym", "portkern.sb3"),
    ("portkern.step",),
    ("portkern.buffer",),
    ("portkern.backends",),
    ("portkern.envs",),
    ("portkern.rng",),
)
#: Cycles still to be broken, each as the set of its modules. The test fails when one of them is broken
#: and still listed here as well as when a new one appears, so this list only shrinks.
KNOWN_CYCLES: list[set[str]] = []


def _name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PKG.rglob("*.py")}


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")  # fmt: skip


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``tree``, each with whether it runs for the type checker only (under ``if
    TYPE_CHECKING:``)."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    todo: list[tuple[ast.AST, bool]] = [(tree, False)]
    while todo:
        node, typing_only = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend((n, True) for n in node.body)
            todo.extend((n, typing_only) for n in node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append((node, typing_only))
        todo.extend((n, typing_only) for n in ast.iter_child_nodes(node))
    return out


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The portkern modules one import statement runs (the closest module for a name inside one)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [node.module or ""])
        else:
            base = node.module or ""
        base = base.rstrip(".")
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for n in names:
        while n and n not in MODULES:
            n = n.rpartition(".")[0]
        if n:
            out.append(n)
    return out


def graph(sources: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """module -> {imported module: "file:line" of the first import statement that makes the edge, marked
    "(TYPE_CHECKING)" where it is imported for the type checker only}; of portkern's own files, or of
    ``sources`` ({module: source text}) in their place."""
    edges: dict[str, dict[str, str]] = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        own = set(_ancestors(module))
        text = path.read_text() if sources is None or module not in sources else sources[module]
        for node, typing_only in _imports(ast.parse(text, str(path))):
            for t in _targets(module, node):
                where = f"{path.relative_to(PKG.parent)}:{node.lineno}" + (" (TYPE_CHECKING)" if typing_only else "")
                for dep in [t] + [a for a in _ancestors(t) if a not in own]:
                    if dep != module:
                        edges[module].setdefault(dep, where)
    return edges


def cycles(edges: dict[str, dict[str, str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def _room(module: str) -> int | None:
    for level, rooms in enumerate(LAYERS):
        if any(module == r or module.startswith(r + ".") for r in rooms):
            return level
    return None


def test_the_graph_sees_imports_inside_functions_and_for_type_checking():
    # An import inside a function (where a cycle hides) is an edge, and so is one under TYPE_CHECKING (which
    # never runs, but ties the two modules' designs together all the same).
    edges = graph()
    assert "portkern.cli" in edges and "portkern.portability.report" in edges
    lazy = ast.parse("def f():\n    from .portability import suite\n")
    assert [(_targets("portkern.cli", n), t) for n, t in _imports(lazy)] == [(["portkern.portability.suite"], False)]
    for guard in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
        hidden = ast.parse(f"import typing\nfrom typing import TYPE_CHECKING\nif {guard}:\n    from . import cli\n"
                           f"else:\n    from . import rng\n")  # fmt: skip
        found = {tuple(_targets("portkern.step", n)): t for n, t in _imports(hidden) if _targets("portkern.step", n)}
        assert found == {("portkern.cli",): True, ("portkern.rng",): False}


def test_a_circle_through_type_checking_imports_is_a_cycle():
    # Two modules naming each other's types under TYPE_CHECKING only: the check must fail on them.
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .{} import {}\n"
    fake = {"portkern.train.ppo": guarded.format("update", "CompiledUpdate"),
            "portkern.train.update": guarded.format("ppo", "Agent")}  # fmt: skip
    edges = graph(fake)
    assert {"portkern.train.ppo", "portkern.train.update"} in cycles(edges)
    assert edges["portkern.train.ppo"]["portkern.train.update"].endswith("(TYPE_CHECKING)")


def test_import_graph_has_no_cycle_but_the_known_ones():
    edges = graph()
    found = cycles(edges)
    shown = ["\n".join(f"  {a} -> {b} ({edges[a][b]})" for a in sorted(c) for b in sorted(edges[a]) if b in c)
             for c in found]  # fmt: skip
    new = [s for c, s in zip(found, shown) if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n\n".join(new)
    broken = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not broken, f"no longer cycles (remove them from KNOWN_CYCLES): {broken}"


def test_no_room_imports_a_room_above_it():
    upward = []
    for module, deps in graph().items():
        mine = _room(module)
        for dep, where in deps.items():
            theirs = _room(dep)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{module} -> {dep} ({where})")
    assert not upward, "imports of a higher room:\n" + "\n".join(sorted(upward))
