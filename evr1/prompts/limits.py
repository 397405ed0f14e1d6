"""Caps on rendering a template: output size, steps, wall time, and operands that build huge values.

Why: a user template (`rollout.template`) runs on every prompt. Two nested `range(100000)` loops
never returned, and `('x' * 10**9)|length` built a 1 GB string, before these caps.

* `range` counts its items against a per-render step budget (nested loops exhaust it at once);
* `*`, `**` and `+` are intercepted: a string/list past `MAX_OUTPUT_CHARS`, or a power past
  `MAX_INT_BITS`, is refused before it is built; calls and filters refuse integer arguments
  past `MAX_OUTPUT_CHARS` (`'x'.ljust(10**9)`, `'x'|center(10**9)`);
* every operator, call, attribute, item and range step also checks the deadline
  (`RENDER_SECONDS`); in the main thread a SIGALRM timer backs it up for loops that touch none;
* the output is streamed and refused past `MAX_OUTPUT_CHARS`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import Template
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_OUTPUT_CHARS = 1_000_000  # far above any prompt data.max_prompt_tokens admits
MAX_STEPS = 2_000_000
MAX_INT_BITS = 4096
RENDER_SECONDS = 5.0


class TemplateLimitError(SecurityError):
    """A template went past a rendering cap (size, steps or time); the message says which."""


@dataclass
class _Budget:
    deadline: float
    steps: int = 0


_budget: ContextVar[_Budget | None] = ContextVar("evr1_template_budget", default=None)


def _tick(n: int = 1) -> None:
    budget = _budget.get()
    if budget is None:
        return
    budget.steps += n
    if budget.steps > MAX_STEPS:
        raise TemplateLimitError(f"template rendering exceeded {MAX_STEPS:,} steps")
    if time.monotonic() > budget.deadline:
        raise TemplateLimitError(f"template rendering exceeded {RENDER_SECONDS} s")


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise TemplateLimitError(f"template built an integer over {MAX_INT_BITS} bits")
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > MAX_OUTPUT_CHARS:
        raise TemplateLimitError(f"template built a value of {len(value):,} items, over {MAX_OUTPUT_CHARS:,}")
    return value


def _check_arguments(args: tuple, kwargs: dict) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OUTPUT_CHARS:
            raise TemplateLimitError(f"template passed {value:,} to a call; arguments are capped at "
                                     f"{MAX_OUTPUT_CHARS:,}")


def _sized(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _limited_range(*args: int) -> Iterator[int]:
    _check_arguments(args, {})
    items = range(*args)
    if len(items) > 100_000:
        raise TemplateLimitError(f"range of {len(items):,} items is over 100,000")
    for item in items:
        _tick()
        yield item


def _capped_filter(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)  # keeps `jinja_pass_arg` (pass_context / pass_environment)
    def filter_(*args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_arguments(args[1:], kwargs)
        return _check_size(fn(*args, **kwargs))

    return filter_


class LimitedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox plus the caps above."""

    intercepted_binops = frozenset({"*", "**", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _limited_range
        self.filters = {name: _capped_filter(fn) for name, fn in self.filters.items()}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                size = _sized(seq)
                if size is not None and isinstance(times, int) and size * times > MAX_OUTPUT_CHARS:
                    raise TemplateLimitError(f"template built a value of {size * times:,} items, "
                                             f"over {MAX_OUTPUT_CHARS:,}")
        if operator == "**" and isinstance(left, (int, float)) and isinstance(right, (int, float)):
            if abs(left) > 1 and right > 0 and right * math.log2(abs(left)) > MAX_INT_BITS:
                raise TemplateLimitError(f"template built an integer over {MAX_INT_BITS} bits")
        if operator == "+" and _sized(left) is not None and _sized(right) is not None:
            if _sized(left) + _sized(right) > MAX_OUTPUT_CHARS:
                raise TemplateLimitError(f"template built a value over {MAX_OUTPUT_CHARS:,} items")
        return _check_size(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's signature)
        _tick()
        _check_arguments(args, kwargs)
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)


@contextmanager
def _render_budget() -> Iterator[None]:
    token = _budget.set(_Budget(time.monotonic() + RENDER_SECONDS))
    try:
        yield
    finally:
        _budget.reset(token)


def render_limited(template: Template, context: dict[str, Any]) -> str:
    """Render under the caps; TemplateLimitError when one is hit (the ItemTimeout alarm in the main thread)."""
    from evr1.rewards.timeouts import ItemTimeout, time_limit

    parts: list[str] = []
    size = 0
    try:
        with _render_budget(), time_limit(RENDER_SECONDS + 1.0):
            for chunk in template.generate(context):
                _tick()
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateLimitError(f"template output is over {MAX_OUTPUT_CHARS:,} characters")
                parts.append(chunk)
    except ItemTimeout:
        raise TemplateLimitError(f"template rendering exceeded {RENDER_SECONDS + 1.0} s") from None
    return "".join(parts)
