"""Render a sample's prompt: pick the family template, place the media placeholder, fill it in.

Rendering runs in Jinja2's `ImmutableSandboxedEnvironment` (user templates cannot reach Python
internals or mutate the sample), under caps on output size, steps and time (evr1/prompts/limits.py),
with `StrictUndefined`, so a template that names a missing field fails with that field's name
instead of printing nothing.

Fixes over the reference: a question without `<video>`/`<image>` gets one at its start (it
crashed vLLM or the actor there); a placeholder the sample has no medium for is an error naming
`problem`; a sample's own `content` column is just another variable (it crashed rendering).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import DictLoader, StrictUndefined, Template, TemplateError

from evr1.prompts.limits import LimitedEnvironment, TemplateLimitError, render_limited
from evr1.prompts.templates import INTROS, TEMPLATES
from evr1.rewards.multiple_choice import label_options
from evr1.rewards.registry import resolve

PLACEHOLDERS = {"video": "<video>", "image": "<image>"}
_TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2")


class PromptError(ValueError):
    """A sample or template that cannot be rendered; the message names the record and the field."""


_env = LimitedEnvironment(
    loader=DictLoader(TEMPLATES),
    undefined=StrictUndefined,
    autoescape=False,
    keep_trailing_newline=False,
)


def _record(sample: Mapping[str, Any]) -> str:
    for key in ("problem_id", "sample_id", "id"):
        if sample.get(key) is not None:
            return f"record {sample[key]!r}"
    return "record (no problem_id)"


def _count(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, (str, bytes)):
        return 1 if value else 0
    if isinstance(value, Sequence):
        return len(value)
    try:
        return len(value)
    except TypeError:
        return 1


def media_counts(sample: Mapping[str, Any]) -> dict[str, int]:
    """How many videos and images a sample carries (`videos`/`images` lists, else `data_type`)."""
    counts = {"video": _count(sample.get("videos")), "image": _count(sample.get("images"))}
    data_type = str(sample.get("data_type") or "").strip().lower()
    if data_type in counts and counts[data_type] == 0 and not any(counts.values()):
        counts[data_type] = 1
    return counts


def place_media(question: str, sample: Mapping[str, Any]) -> tuple[str, str]:
    """The question with its media placeholders checked (or inserted at the start), and the modality."""
    counts = media_counts(sample)
    record = _record(sample)
    if counts["video"] and counts["image"]:
        raise PromptError(f"{record}: fields 'videos' and 'images' are both non-empty; a sample has one modality")
    modality = "video" if counts["video"] else "image" if counts["image"] else "text"
    for medium, placeholder in PLACEHOLDERS.items():
        found = question.count(placeholder)
        if found and not counts[medium]:
            have = f"a {modality}" if modality != "text" else "no media"
            raise PromptError(
                f"{record}: field 'problem' has a {placeholder} placeholder but the sample has {have} "
                f"(fields 'videos'/'images'/'data_type')"
            )
    if modality != "text":
        placeholder = PLACEHOLDERS[modality]
        found, wanted = question.count(placeholder), counts[modality]
        if found == 0:
            question = placeholder * wanted + question
        elif found != wanted:
            raise PromptError(
                f"{record}: field 'problem' has {found} {placeholder} placeholder(s) for {wanted} "
                f"{modality}(s) in field '{modality}s'"
            )
    return question, modality


@lru_cache(maxsize=256)
def _compile(text: str) -> Template:
    return _env.from_string(text)


def _load_template(template: str | os.PathLike[str], record: str) -> Template:
    """A template from a path (PathLike, or a string ending in .jinja/.jinja2/.j2) or from text."""
    is_path = isinstance(template, os.PathLike) or (
        isinstance(template, str) and "\n" not in template and template.strip().endswith(_TEMPLATE_SUFFIXES)
    )
    if is_path:
        path = Path(template).expanduser()
        if not path.is_file():
            # The reference silently fell back to another prompt here (a different task).
            raise PromptError(f"{record}: template file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
    elif isinstance(template, str):
        text = template
    else:
        raise PromptError(f"{record}: template must be a path or template text, got {type(template).__name__}")
    try:
        return _compile(text.strip())
    except TemplateError as exc:
        raise PromptError(f"{record}: template does not compile: {exc}") from exc


def family_template(problem_type: Any) -> str:
    """The canonical name of the template used for a problem type ("generic" when it has none)."""
    family = resolve(problem_type)
    return family if family in TEMPLATES else "generic"


def render(
    sample: Mapping[str, Any],
    *,
    template: str | os.PathLike[str] | None = None,
    thinking: bool = False,
) -> str:
    """The user prompt for one sample.

    `template` is a user template (a path to a .jinja file, or template text) rendered with the
    same variables as the built-in ones; None picks the family's template. `thinking=True` asks
    for `<think>…</think>` reasoning before the answer.
    """
    if not isinstance(sample, Mapping):
        raise PromptError(f"sample must be a mapping, got {type(sample).__name__}")
    record = _record(sample)
    question = sample.get("problem")
    if not isinstance(question, str) or not question.strip():
        raise PromptError(f"{record}: field 'problem' must be a non-empty string, got {question!r}")
    question, modality = place_media(question.strip(), sample)
    options = sample.get("options")
    if options is None:
        options = []
    elif hasattr(options, "tolist"):  # a numpy array from a columnar store
        options = options.tolist()
    if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
        raise PromptError(f"{record}: field 'options' must be a list of strings, got {options!r}")
    context: dict[str, Any] = {k: v for k, v in sample.items() if isinstance(k, str) and k.isidentifier()}
    context.update(
        sample=sample,
        problem=question,
        question=question,
        content=question,  # the reference's alias; a sample's own `content` stays as sample.content
        options=label_options(options),
        modality=modality,
        source=None if modality == "text" else modality,
        intro=INTROS[modality],
        thinking=bool(thinking),
        family=family_template(sample.get("problem_type")),
    )
    compiled = _env.get_template(context["family"]) if template is None else _load_template(template, record)
    try:
        text = render_limited(compiled, context)
    except TemplateLimitError as exc:
        raise PromptError(f"{record}: template refused: {exc}") from exc
    except TemplateError as exc:
        raise PromptError(f"{record}: template rendering failed: {exc}") from exc
    return text.strip()
