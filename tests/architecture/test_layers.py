"""One dependency order for `evr1`, enforced: packages by floor, no circles, no loose modules.

The floors are `docs/architecture.md`'s table. A package may import its own modules and any package
on a lower floor; never one on its own floor (a sibling) or above. Lazy imports inside functions
count (they are where circles hide); `if TYPE_CHECKING:` blocks do not (they never run). A failure
names every offending import with its file and line.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from evr1.pipeline.code import ROOT, Import, imports_of, module_name

FLOORS: dict[str, int] = {
    "cli": 7,
    "pipeline": 5,
    "train": 4, "eval": 4,
    "config": 3, "data": 3, "engines": 3,
    "models": 2, "cache": 2, "prompts": 2, "tracking": 2,
    "video": 1, "rl": 1, "rewards": 1, "cluster": 1,
}
OUTSIDE = {"flows", "tasks", "research", "benchmarks"}  # may import evr1; evr1 imports them only from cli


def evr1_graph() -> list[Import]:
    """Imports from evr1 modules to evr1 modules (and to the code outside evr1 that must not be imported)."""
    out = []
    for path in sorted((ROOT / "evr1").rglob("*.py")):
        out += [i for i in imports_of(path) if i.target.split(".")[0] in {"evr1", *OUTSIDE}]
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "evr1":
        return parts[0]
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_floor():
    packages = {p.name for p in (ROOT / "evr1").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(FLOORS), f"packages without a floor: {packages - set(FLOORS)}; gone: {set(FLOORS) - packages}"


def test_nothing_loose_in_the_evr1_root():
    loose = sorted(p.name for p in (ROOT / "evr1").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules in evr1/ root (give each a package): {loose}"


def test_imports_go_down_the_floors():
    wrong = []
    for imp in evr1_graph():
        src, dst = _package(imp.source), _package(imp.target)
        if src == dst or dst == "":
            continue
        if dst in OUTSIDE:
            ok = src == "cli" and dst == "flows"
        else:
            ok = src in FLOORS and dst in FLOORS and FLOORS[dst] < FLOORS[src]
        if not ok:
            wrong.append(f"{imp.path.relative_to(ROOT)}:{imp.line}: {imp.source} imports {imp.target} "
                         f"({src}, floor {FLOORS.get(src, '?')} -> {dst}, floor {FLOORS.get(dst, '?')})")
    assert not wrong, "imports that do not go down the floors:\n" + "\n".join(wrong)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _module_edges() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for imp in evr1_graph():
        target = imp.target
        if target == imp.source or not target.startswith("evr1"):
            continue
        # Importing a package's module runs the package's __init__ first, which is an edge too.
        edges[imp.source].add(target)
        where.setdefault((imp.source, target), f"{imp.path.relative_to(ROOT)}:{imp.line}")
    return edges, where


def test_no_circles_between_modules():
    edges, where = _module_edges()
    # A package __init__ that re-exports its own modules is not a circle: drop edges from a module to
    # the __init__ of a package that contains it (the __init__ runs first in any case).
    for src in list(edges):
        edges[src] = {t for t in edges[src] if not src.startswith(t + ".")}
    circles = _cycles(edges)
    lines = []
    for comp in circles:
        members = set(comp)
        lines.append(" <-> ".join(comp))
        lines += [f"    {where[(a, b)]}: {a} imports {b}" for a in comp for b in sorted(edges[a] & members)]
    assert not circles, "import circles:\n" + "\n".join(lines)


def test_workers_never_import_the_driver():
    """`train/workers/*` compute; they import the protocol, never the loop that sequences them."""
    driver = {"evr1.train.trainer", "evr1.train.grpo_step", "evr1.train.actor_group", "evr1.train.collect",
              "evr1.train.rollout_backend"}
    wrong = [f"{imp.path.relative_to(ROOT)}:{imp.line}: {imp.source} imports {imp.target}"
             for imp in evr1_graph() if imp.source.startswith("evr1.train.workers") and imp.target in driver]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("folder", ["flows", "tasks", "benchmarks", "research"])
def test_outside_code_uses_no_private_evr1_names(folder):
    """Flows, tasks, benchmarks and research import evr1's public names only (no `_underscore`)."""
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evr1"):
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not wrong, "\n".join(wrong)


def test_the_graph_reader_sees_lazy_imports(tmp_path):
    """The check is only as good as its reader: a function-level import must show up, a TYPE_CHECKING one not."""
    pkg = tmp_path / "evr1" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "evr1" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evr1.pkg import b\n"
                              "def f():\n    from evr1.pkg import c\n    return c\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    found = {i.target for i in imports_of(pkg / "a.py", tmp_path)}
    assert found == {"typing", "evr1.pkg.c"}
    assert module_name(pkg / "a.py", tmp_path) == "evr1.pkg.a"


def test_the_circle_finder_finds_circles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
