"""The table of task families: names, aliases, routing, and loading user-defined families.

A family is a function `(answer_text, sample) -> FamilyResult`; the scorer in `score.py` owns the
answer-tag and format logic, so a family only says how right the text is and whether it parsed.
Routing is by `problem_type`, compared case-, space-, `_`- and `-`-insensitively, so
"Multiple_Choice", "multiple-choice" and " multiple choice " all reach the same family.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

GENERIC = "generic"


class FamilyResult(NamedTuple):
    """What a family says about one answer: accuracy in [0, 1] and whether the text parsed for it."""

    accuracy: float
    parsed: bool


FamilyFn = Callable[[str, Mapping[str, Any]], FamilyResult]
# A training reward for a family that stands in for its accuracy in `overall` (never in `accuracy`).
ShapingFn = Callable[[str, Mapping[str, Any]], float]


@dataclass(frozen=True)
class Family:
    """A registered task family.

    `unbox` says whether a `\\boxed{}` inside the answer tag is unwrapped first (not for code,
    where it is just text). A family whose scoring can run away (symbolic maths, executing
    code) bounds itself with `timeouts.run_limited` / `timeouts.current_timeout()`.

    `prepare` is the family's one-time set-up in a process (importing a slow library, building a
    scorer). It runs before an item's time limit starts (`prepare_family`), so that the seconds an
    import takes on a loaded machine are not charged to the first items, which would score 0 as
    timed out.
    """

    name: str
    fn: FamilyFn
    aliases: tuple[str, ...]
    unbox: bool = True
    module: str = ""
    prepare: Callable[[], Any] | None = None


_FAMILIES: dict[str, Family] = {}  # canonical name -> family
_ROUTES: dict[str, str] = {}  # normalised spelling -> canonical name
_SPELLINGS: dict[str, str] = {}  # spelling as registered -> canonical name
_PLUGIN_FILES: list[str] = []  # files loaded by load_reward_function, replayed in pool workers
_SHAPINGS: dict[str, dict[str, ShapingFn]] = {}  # canonical family name -> shaping name -> function
_PREPARED: set[str] = set()  # families whose `prepare` has run in this process

_KEY_SEP = re.compile(r"[\s_\-]+")


def _key(problem_type: str) -> str:
    return _KEY_SEP.sub(" ", problem_type.strip().lower()).strip()


def register(name: str, *aliases: str, unbox: bool = True, replace: bool = False,
             prepare: Callable[[], Any] | None = None):
    """Decorator: register `fn(answer_text, sample) -> FamilyResult` as the family `name`.

    Aliases route to the same family. A spelling that already routes to another family is a
    `ValueError` unless `replace=True` (how a user deliberately overrides a built-in family).
    `prepare` (no arguments) is the family's one-time set-up, run outside the item time limit:
    see `Family`.
    """

    def decorate(fn: FamilyFn) -> FamilyFn:
        spellings = (name, *aliases)
        keys = {_key(s) for s in spellings}
        if "" in keys:
            raise ValueError(f"register({name!r}): a family name or alias is empty")
        if not replace:
            clashes = sorted(k for k in keys if _ROUTES.get(k, name) != name)
            if clashes:
                raise ValueError(
                    f"register({name!r}): {clashes} already route to "
                    f"{sorted({_ROUTES[k] for k in clashes})}; pass replace=True to override"
                )
        module = getattr(fn, "__module__", "")
        _FAMILIES[name] = Family(name, fn, tuple(aliases), unbox, module, prepare)
        _PREPARED.discard(name)
        for spelling in spellings:
            _ROUTES[_key(spelling)] = name
            _SPELLINGS[spelling] = name
        _route.cache_clear()
        return fn

    return decorate


@lru_cache(maxsize=1024)
def _route(problem_type: str) -> str | None:
    return _ROUTES.get(_key(problem_type))


def resolve(problem_type: Any) -> str | None:
    """Canonical family name for a `problem_type`, or None when no family knows it."""
    if not isinstance(problem_type, str):
        return None
    return _route(problem_type)


def family_for(problem_type: Any) -> tuple[Family, bool]:
    """The family that scores `problem_type`, and whether the type was known (else: generic)."""
    name = resolve(problem_type)
    if name is None:
        return _FAMILIES[GENERIC], False
    return _FAMILIES[name], True


def needs_prepare(family: Family) -> bool:
    """Whether `family` has a set-up that has not yet run in this process."""
    return family.prepare is not None and family.name not in _PREPARED


def prepare_family(family: Family) -> None:
    """Run `family`'s one-time set-up in this process, if it has one and it has not run yet.

    Call it before the item's time limit starts. A set-up that raises is left unmarked and its error
    is not raised here: the family's own call then fails the same way inside the limit, and the item
    is scored 0 with that error in the batch metrics, as it would have been without a set-up.
    """
    if not needs_prepare(family):
        return
    try:
        family.prepare()
    except Exception:  # noqa: BLE001 - reported by the family's own call (see the docstring)
        return
    _PREPARED.add(family.name)


def get_family(name: str) -> Family:
    """A registered family by canonical name or alias (KeyError naming the type otherwise)."""
    canonical = resolve(name)
    if canonical is None:
        raise KeyError(f"no reward family for problem_type {name!r}")
    return _FAMILIES[canonical]


def register_shaping(family: str, name: str, *, replace: bool = False):
    """Decorator: register `fn(answer_text, sample) -> float` (in [0, 1]) as the training reward
    `name` of `family` (any spelling of a registered family).

    Chosen per call (`compute_scores(..., shaping={family: name})`, the trainer's `reward.*`
    options), it takes the place of the family's accuracy in `overall` only: `accuracy` stays the
    family's metric, so validation and evaluation read the same number with or without it. It reads
    the same text the family does (the answer tag's content, or the fallback answer).
    """

    def decorate(fn: ShapingFn) -> ShapingFn:
        canonical = resolve(family)
        if canonical is None:
            raise ValueError(f"register_shaping({family!r}, {name!r}): no such family; register the family first")
        if name in _SHAPINGS.get(canonical, {}) and not replace:
            raise ValueError(f"register_shaping: {canonical!r} already has a shaping {name!r}; pass replace=True")
        _SHAPINGS.setdefault(canonical, {})[name] = fn
        return fn

    return decorate


def shapings(family: str) -> list[str]:
    """The training rewards registered for `family` (any spelling), by name."""
    return sorted(_SHAPINGS.get(resolve(family) or "", {}))


def get_shaping(family: str, name: str) -> ShapingFn:
    """A registered shaping of `family` (any spelling); KeyError naming the ones there are."""
    known = _SHAPINGS.get(resolve(family) or "", {})
    if name not in known:
        raise KeyError(f"no shaping {name!r} for family {family!r} (registered: {sorted(known)})")
    return known[name]


def check_shaping(shaping: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """`{family (any spelling): shaping name}` checked (ValueError naming the unknown one) and put in
    canonical, hashable form: ((canonical family, name), ...), sorted."""
    out = {}
    for family, name in (shaping or {}).items():
        canonical = resolve(family)
        if canonical is None or name not in _SHAPINGS.get(canonical, {}):
            raise ValueError(f"shaping: no training reward {name!r} for family {family!r} "
                             f"(registered: {shapings(family) if canonical else 'no such family'})")
        out[canonical] = name
    return tuple(sorted(out.items()))


def known_problem_types() -> set[str]:
    """Every spelling a family was registered under (canonical names and aliases)."""
    return set(_SPELLINGS)


def families() -> dict[str, Family]:
    """Canonical name -> family, for documentation and benchmarks."""
    return dict(_FAMILIES)


def plugin_files() -> list[str]:
    """Files loaded with `load_reward_function`, so that pool workers can load them again."""
    return list(_PLUGIN_FILES)


def load_reward_function(reference: str) -> Callable[..., Any]:
    """Load `path/to/file.py:function` (function defaults to `main`) and return the function.

    The file is loaded by path with importlib, so any `@register` in it runs: this is how a
    user-defined family joins the registry. Loading the same file twice reuses the module.
    """
    path_text, _, fn_name = str(reference).rpartition(":")
    if not path_text or not path_text.endswith(".py"):
        # No ":function" suffix (or a Windows drive colon): the whole reference is the path.
        path_text, fn_name = str(reference), "main"
    fn_name = fn_name or "main"
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"reward function {reference!r}: no file {str(path)!r}")
    module_name = "evr1_user_reward_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"reward function {reference!r}: cannot load {str(path)!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        _PLUGIN_FILES.append(str(path))
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"reward function {reference!r}: {str(path)!r} has no function {fn_name!r}")
    return fn
