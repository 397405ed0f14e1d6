"""Reading a config: YAML files with unique keys, `a.b.c=value` overrides, paths anchored at the file,
and errors that name the key and the source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evr1.config.base import ConfigError
from evr1.config.root import Config


def _names(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def _format_error(err: ValidationError, source: str) -> str:
    lines = []
    missing = [".".join(str(p) for p in e["loc"]) for e in err.errors() if e["type"] == "missing"]
    top = [key for key in missing if "." not in key]
    if top:  # one line for the missing sections, naming them (not "Field required" once per section)
        lines.append(f"{source}: missing the section{'s' if len(top) > 1 else ''} {_names(top)} "
                     f"(a config needs at least {_names(_required_sections())})")
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "missing":
            if "." in key:
                lines.append(f"{source}: missing key '{key}'")
        elif e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        elif isinstance(e.get("input"), dict):  # a cross-field rule: the message names the keys, not a section dump
            lines.append(f"{source}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"{source}: key '{key}': {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def _required_sections() -> list[str]:
    return [name for name, field in Config.model_fields.items() if field.is_required()]


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error naming its line (YAML
    itself says keys are unique; PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} on line {line} (first on line {seen[key]})", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a", "b", "c"], value); the value is read as YAML (numbers, lists, null)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected key.path=value")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else ""


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each `a.b.c=value` in a nested dict (a copy); sections are created as needed."""
    data = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise ConfigError(f"override {text!r}: '{part}' is not a section")
            node = node[part]
        node[path[-1]] = value
    return data


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply overrides, validate; errors name the key and the file."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        reason = " ".join(str(e).split())
        raise ConfigError(f"{path}: cannot read config: {reason}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    if not data and not overrides:
        raise ConfigError(f"{path}: the config file is empty: it needs at least the sections "
                          f"{_names(_required_sections())}")
    data = _anchor_data_paths(data, Path(os.path.abspath(path)).parent)
    source = str(path) if not overrides else f"{path} (with overrides {' '.join(overrides)})"
    try:
        return Config.model_validate(apply_overrides(data, list(overrides)))
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def _anchor_data_paths(data: dict, folder: Path) -> dict:
    """Relative `data.train_files`, `data.eval_files` and `data.data_root` in a config file are read
    against the file's folder (where a user keeps them beside it), not the working directory;
    overrides on the command line stay as given."""
    section = data.get("data")
    if not isinstance(section, dict):
        return data

    def anchor(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        given = Path(value).expanduser()
        return str(given if given.is_absolute() else folder / given)

    section = dict(section)
    for key in ("train_files", "eval_files"):
        if isinstance(section.get(key), list):
            section[key] = [anchor(v) for v in section[key]]
    if "data_root" in section:
        section["data_root"] = anchor(section["data_root"])
    return {**data, "data": section}


def config_from_dict(data: dict, source: str = "<dict>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def flat_params(cfg: Config) -> dict[str, str]:
    """The config as flat `section.key` → string pairs, for MLflow params."""
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = json.dumps(node) if not isinstance(node, str) else node

    walk("", cfg.model_dump(mode="json"))
    return out
