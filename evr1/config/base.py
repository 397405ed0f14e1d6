"""What every config section shares: unknown keys are errors, NaN and booleans-as-numbers refused.

Every section forbids unknown keys, so a typo fails loudly with the key and the file instead of
silently falling back to a default (a trap in the reference project, its §7.1 item 11).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, field_validator



class ConfigError(ValueError):
    """A config file or override that does not validate; the message names the key and its source."""


def _leaf_types(annotation: Any) -> set[Any]:
    """The types a field admits, through Optional/Union (`int | None` → {int, NoneType})."""
    if get_origin(annotation) in (Union, type(int | None)):
        return set().union(*(_leaf_types(a) for a in get_args(annotation)))
    return {annotation}


class Section(BaseModel):
    # Strict where a lax reading wrecks a run: no NaN/inf floats, no `true` read as the number 1.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: Any) -> Any:
        if isinstance(value, bool):
            admits = _leaf_types(cls.model_fields[info.field_name].annotation)
            if admits & {int, float} and bool not in admits:
                raise ValueError(f"expected a number, not the boolean {str(value).lower()}")
        return value


def refuse_hub_id(path: str | None, field: str) -> str | None:
    """`path` unchanged, unless it names no folder here and reads as a Hugging Face hub id ("org/name"):
    evr1 never downloads weights inside a stage, so that is refused now, with the command that fixes it."""
    if path is None or Path(path).exists() or path.startswith((".", "/", "~")) or "://" in path:
        return path
    parts = path.split("/")
    if len(parts) == 2 and all(parts):
        raise ValueError(f"{field} {path!r} is a Hugging Face hub id, not a model folder on this machine: download it "
                         f"first (`hf download {path} --local-dir /shared/models/{parts[1]}`) and set {field} to that folder")
    return path
