"""The import graph of `evr1/` read from source (every `import`, lazy ones inside functions included).

`TYPE_CHECKING` blocks are left out: they never run, so they cannot form a circle at import time.
Used by the layer test and by the stage-code test (`pipeline.lineage`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    source: str   # dotted module that imports
    target: str   # dotted module (or package) imported
    line: int
    path: Path


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            yield from (n for b in child.orelse for n in [b, *_walk(b)])
            continue
        yield child
        yield from _walk(child)


def imports_of(path: Path, root: Path = ROOT) -> Iterator[Import]:
    """Every evr1 module `path` imports, resolving relative imports and `from pkg import module`."""
    source = module_name(path, root)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, alias.name, node.lineno, path)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield Import(source, full if _is_module(full, root) else base, node.lineno, path)


def _is_module(dotted: str, root: Path = ROOT) -> bool:
    p = root.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def evr1_graph(root: Path = ROOT) -> list[Import]:
    """Imports between evr1 modules (and from evr1 to flows/tasks/research/benchmarks)."""
    out = []
    for path in sorted((root / "evr1").rglob("*.py")):
        for imp in imports_of(path, root):
            if imp.target.split(".")[0] in {"evr1", "flows", "tasks", "research", "benchmarks"}:
                out.append(imp)
    return out
