"""Which source files a stage runs: the import closure of its stage function, read from the source.

A stage's cache key holds a hash of the code it runs (`lineage.code_version`), so that editing the
trainer re-runs training but not ingest. A hand-kept list of packages per stage drifted (training
had stopped listing `data`, which it imports); here the list is derived instead: the imports inside
the stage function's body (stages import what they run there), then everything those modules import,
lazily or not, transitively. `if TYPE_CHECKING:` blocks never run and are left out.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import evr1

PACKAGE = Path(evr1.__file__).resolve().parent
ROOT = PACKAGE.parent


@dataclass(frozen=True)
class Import:
    source: str  # dotted module that imports
    target: str  # dotted module (or package) it imports
    line: int
    path: Path


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(dotted: str, root: Path = ROOT) -> Path | None:
    p = root.joinpath(*dotted.split("."))
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for branch in child.orelse:
                yield branch
                yield from _walk(branch)
            continue
        yield child
        yield from _walk(child)


def imports_in(node: ast.AST, path: Path, root: Path = ROOT) -> Iterator[Import]:
    """The imports under `node` (a module or a function) of the file `path`, targets resolved to the
    module they name: `from evr1.eval import aio` is `evr1.eval.aio`, `from evr1.eval import score` is
    `evr1.eval`; relative imports are made absolute."""
    source = module_name(path, root)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    for n in _walk(node):
        if isinstance(n, ast.Import):
            for alias in n.names:
                yield Import(source, alias.name, n.lineno, path)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                anchor = package.split(".")[: len(package.split(".")) - n.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in n.names:
                full = f"{base}.{alias.name}"
                yield Import(source, full if module_path(full, root) else base, n.lineno, path)


def imports_of(path: Path, root: Path = ROOT) -> Iterator[Import]:
    yield from imports_in(ast.parse(path.read_text(), filename=str(path)), path, root)


# Packages whose modules are found at run time (each benchmark definition registers itself when
# `load_all()` imports it): when such a package is in a closure, all its modules are.
DISCOVERED: tuple[str, ...] = ("evr1.eval.benchmarks",)


def _named_modules(tree: ast.AST) -> set[str]:
    """Modules a registry names in a string ("evr1.engines.hf:HFEngine") and imports when asked."""
    return {n.value.partition(":")[0] for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("evr1.")
            and n.value.partition(":")[0].replace(".", "").replace("_", "").isalnum()
            and module_path(n.value.partition(":")[0]) is not None}


@functools.lru_cache(maxsize=None)
def _direct(dotted: str) -> tuple[str, ...]:
    path = module_path(dotted)
    if path is None:
        return ()
    tree = ast.parse(path.read_text(), filename=str(path))
    found = {i.target for i in imports_in(tree, path) if i.target.split(".")[0] == "evr1"} | _named_modules(tree)
    if dotted in DISCOVERED:
        found |= {module_name(p) for p in path.parent.glob("*.py") if p.name != "__init__.py"}
    return tuple(sorted(found))


def _with_parents(dotted: str) -> list[str]:
    """A module and the packages above it: importing `evr1.a.b` runs `evr1/a/__init__.py` first."""
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(1, len(parts))]


def closure(modules: tuple[str, ...] | list[str]) -> set[str]:
    """Every evr1 module that importing `modules` can load, lazy imports included."""
    seen: set[str] = set()
    todo = [m for mod in modules for m in _with_parents(mod)]
    while todo:
        m = todo.pop()
        if m in seen or module_path(m) is None:
            continue
        seen.add(m)
        for target in _direct(m):
            todo.extend(_with_parents(target))
    return seen


def function_imports(module: str, function: str) -> list[str]:
    """The evr1 modules imported inside `module.function`'s body, and inside the module-level helpers
    of the same module that it calls (by name), transitively."""
    path = module_path(module)
    assert path is not None, module
    tree = ast.parse(path.read_text(), filename=str(path))
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if function not in defs:
        raise KeyError(f"{module} has no function {function!r}")
    found: set[str] = set()
    todo, done = [function], set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        node = defs[name]
        found |= {i.target for i in imports_in(node, path) if i.target.split(".")[0] == "evr1"}
        todo += [c.func.id for c in ast.walk(node)
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in defs]
    return sorted(found)


def stage_files(module: str, function: str) -> list[Path]:
    """The source files of the stage function's import closure, sorted."""
    return sorted(p for m in closure(function_imports(module, function)) if (p := module_path(m)) is not None)
