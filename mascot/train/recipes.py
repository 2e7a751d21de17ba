"""Recipes of both training stages: YAML files (bundled in mascot/recipes/ or any path) plus `--field value`
overrides -> the stage's typed config (`Stage1Config`, `Stage2Config`).

Values are coerced to each field's declared type (YAML 1.1 reads `1e-5` as a string; CLI values are
strings); unknown recipes, fields and sections fail with the valid names and the closest ones.

    cfg = load_recipe("tiny-cpu", {"max-contexts": "12", "grpo.learning_rate": "1e-4"})
    director = load_recipe("tiny-cpu", {"max_states": "8"}, stage="stage2")
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mascot.errors import ConfigError, unknown_name
from mascot.train.stage1.config import Stage1Config
from mascot.train.stage2.config import Stage2Config
from mascot.train.trl_configs import TRAINER_SECTIONS, check_section, trainer_fields

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


@dataclass(frozen=True)
class StageRecipes:
    """Where a stage's recipes live and what they fill."""

    config: type  # the typed config a recipe fills
    folder: Path  # the bundled recipes
    label: str  # how messages name one of its recipes
    backend_field: str  # the config field naming the backend that generates (read before TRL loads)
    backend_default: str

    @property
    def sections(self) -> tuple[str, ...]:
        """The config's trainer sections (fields passed straight to TRL), in field order."""
        return tuple(f.name for f in dataclasses.fields(self.config) if f.name in TRAINER_SECTIONS)

    def fields(self) -> dict[str, Any]:
        """The fields a recipe may set (all but `recipe`, which records where it came from)."""
        return {f.name: f for f in dataclasses.fields(self.config) if f.name != "recipe"}


STAGES = {
    "stage1": StageRecipes(Stage1Config, RECIPES_DIR, "recipe", "backend", "transformers"),
    "stage2": StageRecipes(Stage2Config, RECIPES_DIR / "stage2", "stage-2 recipe", "rollout_backend", "auto"),
}


def stage_recipes(stage: str) -> StageRecipes:
    if stage not in STAGES:
        raise unknown_name("training stage", stage, list(STAGES))
    return STAGES[stage]


# ------------------------------------------------------------------- coercion
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


def _coerce_section(section: str, values: Any, where: str) -> dict[str, Any]:
    """A trainer section's fields, each checked against its TRL class and coerced to the field's type."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: section {section!r} must be a mapping.")
    valid = trainer_fields(section)
    check_section(section, values, valid)
    return {k: coerce(v, valid[k].type, f"{section}.{k}") for k, v in values.items()}


def _did_you_mean(name: str, valid: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    return f" Did you mean {', '.join(prefix + c for c in close)}?" if close else ""


# ------------------------------------------------------------------- recipes
def list_recipes(stage: str = "stage1") -> list[str]:
    """Names of a stage's bundled recipes (mascot/recipes/*.yaml, mascot/recipes/stage2/*.yaml)."""
    return sorted(p.stem for p in stage_recipes(stage).folder.glob("*.yaml"))


def recipe_path(name_or_path: str | Path, stage: str = "stage1") -> Path:
    """The YAML file of a bundled recipe name or a recipe path; raises ConfigError naming the bundled ones."""
    st = stage_recipes(stage)
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        if not p.exists():
            raise ConfigError(f"Recipe file {p} does not exist. Bundled {st.label}s: {', '.join(list_recipes(stage))}.")
        return p
    bundled = st.folder / f"{name_or_path}.yaml"
    if not bundled.exists():
        raise unknown_name(st.label, str(name_or_path), list_recipes(stage))
    return bundled


def normalise_key(key: str) -> str:
    """`--max-contexts` / `max-contexts` -> `max_contexts`; `grpo.learning-rate` -> `grpo.learning_rate`."""
    return key.lstrip("-").replace("-", "_")


def config_from_dict(data: Any, overrides: dict[str, Any] | None = None, source: str = "<dict>",
                     stage: str = "stage1") -> Any:
    """Validate and coerce a recipe mapping plus `{field or section.field: value}` overrides into the stage's config."""
    st = stage_recipes(stage)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a recipe must be a YAML mapping of field: value.")
    top = st.fields()
    hints = typing.get_type_hints(st.config)
    sections = st.sections
    plain = sorted(k for k in top if k not in sections)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in top:
            raise ConfigError(f"{source}: unknown recipe field {key!r}. Valid fields: {', '.join(sorted(top))}."
                              + _did_you_mean(key, list(top)))
        values[key] = _coerce_section(key, value, source) if key in sections else coerce(value, hints[key], key)
    for raw_key, value in (overrides or {}).items():
        key = normalise_key(raw_key)
        if "." in key:
            section, sub = key.split(".", 1)
            if section not in sections:
                raise ConfigError(f"Unknown override '--{raw_key}': dotted overrides go to the sections {', '.join(sections)}.")
            values[section] = {**values.get(section, {}), **_coerce_section(section, {sub: value}, f"--{raw_key}")}
        elif key in sections and isinstance(value, dict):  # a section given whole updates the recipe's, key by key
            values[key] = {**values.get(key, {}), **_coerce_section(key, value, f"--{raw_key}")}
        elif key in top and key not in sections:
            values[key] = coerce(value, hints[key], key)
        else:
            trainer = ", ".join(f"--{s}.<field>" for s in sections)
            raise ConfigError(
                f"Unknown option '--{raw_key}'.{_did_you_mean(key, plain, '--')} Valid recipe fields: {', '.join(plain)}; "
                f"TRL trainer fields go as {trainer}."
            )
    cfg = st.config(**values)
    cfg.recipe = source
    return cfg


def read_recipe_yaml(path: Path) -> Any:
    """A recipe file's YAML (an empty file reads as {}); a parse error names the file."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}).") from exc


def load_recipe(name_or_path: str | Path, overrides: dict[str, Any] | None = None, stage: str = "stage1") -> Any:
    """Load a stage's bundled recipe by name (`tiny-cpu`, `paper-gpu`) or any YAML path, then apply overrides."""
    path = recipe_path(name_or_path, stage)
    return config_from_dict(read_recipe_yaml(path), overrides, source=str(name_or_path), stage=stage)


def recipe_backend(name_or_path: str | Path, overrides: dict[str, Any] | None = None, stage: str = "stage1") -> str:
    """The backend a stage's recipe generates with (Stage 1: candidates, `backend`; Stage 2: rollouts,
    `rollout_backend`), resolved (`auto` -> llamacpp or transformers) without building the config: validating
    the TRL sections imports TRL and torch, and the CLIs load llama.cpp before those when it will generate."""
    from mascot.backends import resolve_kind

    st = stage_recipes(stage)
    data = read_recipe_yaml(recipe_path(name_or_path, stage))
    merged = {**(data if isinstance(data, dict) else {}), **{normalise_key(k): v for k, v in (overrides or {}).items()}}
    return resolve_kind(str(merged.get(st.backend_field, st.backend_default)), str(merged.get("model", "embedded")))
