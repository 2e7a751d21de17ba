"""Recipes: YAML files (bundled in mascot/recipes/ or any path) plus `--field value` overrides -> Stage1Config.

Values are coerced to each field's declared type (YAML 1.1 reads `1e-5` as a string; CLI values are
strings); unknown recipes, fields and sections fail with the valid names.

    cfg = load_recipe("tiny-cpu", {"max-contexts": "12", "grpo.learning_rate": "1e-4"})
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml

from mascot.errors import ConfigError, unknown_name
from mascot.train.configs import RECIPES_DIR, SECTIONS, _SECTION_FIELDS, Stage1Config, _check_section, stage1_fields


def _type_text(tp: Any) -> str:
    """`float`, `int | None`, `list[str] | None`, ... as text (dataclass types may be objects or strings)."""
    if isinstance(tp, str):
        return tp
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).lower() in ("true", "yes", "1", "false", "no", "0"):
        return str(value).lower() in ("true", "yes", "1")
    raise ValueError


def coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert a YAML/CLI value to a dataclass field's declared type (given as a type or its text).

    Strings are parsed as YAML first (so `--personas [Anchor, Beacon]` and `--grpo.bf16 false` work),
    then numbers are converted by the declared type (`1e-5` is a string in YAML 1.1).
    """
    text = _type_text(tp)
    first = text.split("|")[0].strip()
    if first == "None":  # e.g. `None | str | list[str]`
        first = text.split("|")[1].strip()
    if isinstance(value, str):
        if value.strip().lower() in ("none", "null", "~") and "None" in text:
            return None
        try:
            parsed = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            parsed = value
        value = value if parsed is None else parsed
    if value is None:
        return None
    try:
        if first == "bool":
            return _parse_bool(value)
        if first == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if first == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if first.startswith("list"):
            items = value if isinstance(value, list) else [v.strip() for v in str(value).split(",") if v.strip()]
            inner = first[5:-1] if first.startswith("list[") else ""
            if inner == "float":
                return [float(v) for v in items]
            if inner == "int":
                return [int(v) for v in items]
            if inner == "str":
                return [str(v) for v in items]
            return items
        if first.startswith("dict") and not isinstance(value, dict):
            if isinstance(value, str) and "str" in text:
                return value  # TRL accepts JSON strings for dict fields
            raise ValueError
        if first == "str" and not isinstance(value, str) and "list" not in text and "dict" not in text:
            return str(value)
    except (ValueError, TypeError):
        raise ConfigError(f"Field '{name}' expects {text}; got {value!r}.") from None
    return value


def _coerce_top(name: str, value: Any) -> Any:
    hints = typing.get_type_hints(Stage1Config)
    return coerce(value, hints[name], name) if name not in SECTIONS else value


def _coerce_section(section: str, key: str, value: Any) -> Any:
    valid = _SECTION_FIELDS[section][1]()
    if key not in valid:
        _check_section(section, {key: value}, valid, ())
    return coerce(value, valid[key].type, f"{section}.{key}")


# ------------------------------------------------------------------- recipes
def list_recipes() -> list[str]:
    """Names of the bundled recipes (mascot/recipes/*.yaml)."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        if not p.exists():
            raise ConfigError(f"Recipe file {p} does not exist. Bundled recipes: {', '.join(list_recipes())}.")
        return p
    bundled = RECIPES_DIR / f"{name_or_path}.yaml"
    if not bundled.exists():
        raise unknown_name("recipe", str(name_or_path), list_recipes())
    return bundled


def normalise_key(key: str) -> str:
    """`--max-contexts` / `max-contexts` -> `max_contexts`; `grpo.learning-rate` -> `grpo.learning_rate`."""
    return key.lstrip("-").replace("-", "_")


def config_from_dict(data: dict[str, Any], overrides: dict[str, Any] | None = None, source: str = "<dict>") -> Stage1Config:
    """Validate and coerce a recipe mapping plus `{field or section.field: value}` overrides."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a recipe must be a YAML mapping of field: value.")
    top = stage1_fields()
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in top:
            raise ConfigError(f"{source}: unknown recipe field {key!r}. Valid fields: {', '.join(sorted(top))}.")
        if key in SECTIONS:
            if value is None:
                value = {}
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: section {key!r} must be a mapping.")
            values[key] = {k: _coerce_section(key, k, v) for k, v in value.items()}
        else:
            values[key] = _coerce_top(key, value)
    for raw_key, value in (overrides or {}).items():
        key = normalise_key(raw_key)
        if "." in key:
            section, sub = key.split(".", 1)
            if section not in SECTIONS:
                raise ConfigError(f"Unknown override '--{raw_key}': dotted overrides go to the sections {', '.join(SECTIONS)}.")
            values.setdefault(section, {})
            values[section] = {**values[section], sub: _coerce_section(section, sub, value)}
        elif key in top and key not in SECTIONS:
            values[key] = _coerce_top(key, value)
        else:
            close = difflib.get_close_matches(key, [k for k in top if k not in SECTIONS], n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join('--' + c for c in close)}?" if close else ""
            raise ConfigError(
                f"Unknown option '--{raw_key}'.{hint} Valid recipe fields: {', '.join(sorted(k for k in top if k not in SECTIONS))}; "
                f"TRL trainer fields go as --reward_model.<field>, --grpo.<field> or --sft.<field>."
            )
    cfg = Stage1Config(**values)
    cfg.recipe = source
    return cfg


def read_recipe_yaml(path: Path) -> Any:
    """A recipe file's YAML (an empty file reads as {}); a parse error names the file."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}).") from exc


def load_recipe(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Stage1Config:
    """Load a bundled recipe by name (`tiny-cpu`, `paper-gpu`) or any YAML path, then apply overrides."""
    return config_from_dict(read_recipe_yaml(recipe_path(name_or_path)), overrides, source=str(name_or_path))


def backend_of(data: Any, overrides: dict[str, Any] | None, key: str, default: str) -> str:
    """The backend a recipe mapping plus overrides names in `key`, resolved (`auto` -> llamacpp or transformers),
    read without building the config: validating the TRL sections imports TRL and torch, and the CLIs load
    llama.cpp before those when it will generate (both training stages)."""
    from mascot.backends import resolve_kind

    merged = {**(data if isinstance(data, dict) else {}), **{normalise_key(k): v for k, v in (overrides or {}).items()}}
    return resolve_kind(str(merged.get(key, default)), str(merged.get("model", "embedded")))


def recipe_generation_backend(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> str:
    """The Stage-1 recipe's candidate-generation backend (`backend_of` its `backend` field)."""
    return backend_of(read_recipe_yaml(recipe_path(name_or_path)), overrides, "backend", "transformers")
