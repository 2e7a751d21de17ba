"""The one typed settings object for the engine, filled from `MASCOT_*` environment variables by the
entry points (`app.py` through `app/settings.py`, the `python -m mascot` CLIs) and passed down.

Nothing below the entry points reads the environment: a backend, detector or trainer takes the values
it needs as arguments. `apply_process_defaults` makes the one process-wide change (OpenMP's wait policy)
and is called by the entry points, never at import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from mascot.errors import ConfigError

T = TypeVar("T", bound="Settings")

ENV_PREFIX = "MASCOT_"
REPLY_MODES = ("fast", "careful")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _default_data_dir() -> str:
    return str(Path.cwd() / "data")


def _default_cache_dir() -> str:
    return str(Path.home() / ".cache" / "mascot")


@dataclass
class Settings:
    """Where data and caches live, and how the model backends and the crisis check run.

    Every field `name` is read from `MASCOT_<NAME>` by `from_env`; explicit overrides win."""

    data_dir: str = field(default_factory=_default_data_dir)  # annotation DB, safety log, chat exports
    cache_dir: str = field(default_factory=_default_cache_dir)  # converted models, GGUF LoRAs, probes
    annotation_db_url: str = ""  # default: sqlite file annotation.db under data_dir
    jobs_db_url: str = ""  # the console's job table; default: sqlite file jobs.db under data_dir
    safety_log: str = ""  # default: data_dir/safety_events.sqlite
    safety_llm_judge: bool = False  # an LLM second opinion on gray-zone messages (openai/vllm backends only)
    llamacpp_weights: str = "auto"  # auto | bf16 | q8_0 | native | f32
    llamacpp_decode_weights: str = "auto"  # auto | native | q8_0 | bf16 | f32 | same
    llamacpp_threads: int = 0  # 0: calibrated at load
    llamacpp_omp_wait_policy: str = ""  # OpenMP wait policy while llama.cpp starts its thread pool
    llamacpp_probe: bool = True  # check once (cached) that the llama.cpp build runs on this CPU
    llamacpp_keep_prefixes: bool = True  # system messages' keys and values kept on disk for the next start
    judge_base_url: str = ""  # the `llm` judge's OpenAI-compatible server (else OPENAI_BASE_URL)
    judge_model: str = ""
    judge_api_key: str = ""
    judge_cache: str = ""  # default: cache_dir/judge_cache.sqlite
    replies: str = "careful"  # careful: best of `careful_best_of` by the acceptability scorer | fast: the first draw
    careful_best_of: int = 3
    stems: bool = True  # replies start from their persona's opening words (Persona.stems)

    def __post_init__(self) -> None:
        if self.replies not in REPLY_MODES:
            raise ConfigError(f"{ENV_PREFIX}REPLIES={self.replies!r}: use one of {', '.join(REPLY_MODES)}.")
        if not 1 <= self.careful_best_of <= 8:
            raise ConfigError(f"{ENV_PREFIX}CAREFUL_BEST_OF={self.careful_best_of}: use a whole number from 1 to 8.")
        if not self.annotation_db_url:
            self.annotation_db_url = f"sqlite:///{Path(self.data_dir) / 'annotation.db'}"
        if not self.jobs_db_url:
            self.jobs_db_url = f"sqlite:///{Path(self.data_dir) / 'jobs.db'}"
        if not self.safety_log:
            from mascot.safety.events import default_log_path  # stdlib only; keeps settings import-light

            self.safety_log = str(default_log_path(self.data_dir))

    @classmethod
    def from_env(cls: type[T], environ: Any = None, **overrides: object) -> T:
        """Settings from `MASCOT_*` variables, then explicit overrides (None means 'not given')."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, f.type, raw)
        for key, standard in (("judge_base_url", "OPENAI_BASE_URL"), ("judge_api_key", "OPENAI_API_KEY")):
            if key not in values and env.get(standard):  # the OpenAI client's own variables as a fallback
                values[key] = env[standard]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def backend_options(self) -> dict[str, object]:
        """The options `mascot.backends.load_backend` passes on to the backend that accepts them."""
        return backend_options(self)

    def llm_judge_options(self) -> dict[str, object]:
        return {"base_url": self.judge_base_url or None, "model": self.judge_model or None,
                "api_key": self.judge_api_key or None,
                "cache_path": self.judge_cache or str(Path(self.cache_dir) / "judge_cache.sqlite")}


BACKEND_FIELDS = ("cache_dir", "llamacpp_weights", "llamacpp_decode_weights", "llamacpp_threads",
                  "llamacpp_omp_wait_policy", "llamacpp_probe", "llamacpp_keep_prefixes")


def backend_options(source: object) -> dict[str, object]:
    """`load_backend` options from any object with the `BACKEND_FIELDS` (Settings, EngineConfig)."""
    return {"cache_dir": source.cache_dir, "weights": source.llamacpp_weights,  # type: ignore[attr-defined]
            "decode_weights": source.llamacpp_decode_weights,  # type: ignore[attr-defined]
            "threads": source.llamacpp_threads or None,  # type: ignore[attr-defined]
            "omp_wait_policy": source.llamacpp_omp_wait_policy, "probe": source.llamacpp_probe,  # type: ignore[attr-defined]
            "keep_prefixes": source.llamacpp_keep_prefixes}  # type: ignore[attr-defined]


def _parse(name: str, tp: object, raw: str) -> object:
    if tp in ("int", int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a whole number.") from None
    if tp in ("bool", bool):
        low = raw.strip().lower()
        if low not in _TRUE + _FALSE:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()}={raw!r}: use one of {', '.join(_TRUE + _FALSE)}.")
        return low in _TRUE
    return raw


def apply_process_defaults() -> None:
    """OpenMP threads that spin while waiting steal the cores another process needs on small CPUs; sleeping
    waits cost nothing measurable here. Must run before torch or llama.cpp starts its thread pool."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
