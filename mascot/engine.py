"""The process-wide engine: one backend (loaded once, shared by all sessions) plus the adapters
found in `checkpoints/`, and a factory for per-session GroupChats."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mascot.backends import Backend, load_backend
from mascot.chat import GroupChat
from mascot.checkpoints import director_adapter_dir, find_run, is_adapter, persona_adapter_path
from mascot.director import DIRECTOR_ADAPTER
from mascot.errors import MascotError
from mascot.personas import Persona, PersonaPack
from mascot.speaker import adapter_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    """Which backend and model to load, and where trained adapters live."""

    backend: str = "auto"  # llamacpp on CPU, transformers on a GPU (mascot.backends.resolve_kind)
    model: str = "embedded"
    dtype: str = "auto"
    device: str = "auto"
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str = "EMPTY"
    checkpoints_dir: str = "checkpoints"
    run: str | None = None


@dataclass
class Engine:
    """A loaded backend plus the warnings raised while attaching adapters (shown in the UI)."""

    config: EngineConfig
    backend: Backend
    warnings: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    # Per pack: who fell back to the prompted base model (names only, no paths: shown in the public UI).
    fallbacks: dict[str, list[str]] = field(default_factory=dict)
    _loaded_packs: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach_adapters(self, pack: PersonaPack) -> list[str]:
        """Load each persona's LoRA (and the director's) onto the shared base, once per pack.

        A missing or ill-fitting adapter gives a warning and that persona runs prompted instead.
        """
        with self._lock:
            if pack.name in self._loaded_packs:
                return []
            self._loaded_packs.add(pack.name)
            new: list[str] = []
            fell_back = self.fallbacks.setdefault(pack.name, [])
            for p in pack.personas:
                found = self.attach_persona(p)
                new += found
                fell_back += [p.name] if found else []
            if self.run_dir is not None and DIRECTOR_ADAPTER not in self.backend.adapters:
                d = director_adapter_dir(self.run_dir)
                if is_adapter(d):
                    found = self._try_add(DIRECTOR_ADAPTER, d, "the director")
                    new += found
                    fell_back += ["the director"] if found else []
            self.warnings += new
            return new

    def attach_persona(self, persona: Persona) -> list[str]:
        name = adapter_name(persona)
        if name in self.backend.adapters:
            return []
        path = persona_adapter_path(persona, self.run_dir)
        if path is None:
            return []
        if not path.exists():
            msg = f"{persona.name}: adapter path {path} does not exist; {persona.name} runs on the prompted base model."
            log.warning(msg)
            return [msg]
        return self._try_add(name, path, persona.name)

    def _try_add(self, name: str, path: Path, who: str) -> list[str]:
        try:
            self.backend.add_adapter(name, str(path))
            log.info("loaded adapter %s from %s", name, path)
            return []
        except MascotError as exc:
            msg = f"{who}: {exc} Falling back to the prompted base model."
            log.warning(msg)
            return [msg]

    def warm_up(self, pack: PersonaPack, mode: str = "trained") -> float:
        """Pay the first chat turn's one-off costs now: the safety classifiers, each speaker's cached persona
        prompt and the director's scoring prompt. Nothing is logged. Returns the seconds it took.

        Measured on the llamacpp backend: the first turn's first token took 4.5 s cold and 0.44 s after this."""
        import time

        from mascot.backends.base import GenerationParams
        from mascot.dialogue import Dialogue, Turn
        from mascot.director import DirectorState
        from mascot.safety import default_detector

        t = time.perf_counter()
        self.attach_adapters(pack)
        text = pack.starters[0] if pack.starters else "Hello."
        detector = default_detector()
        detector.check(text, record=False)
        detector.check_reply("That sounds hard. I am here with you.", record=False)
        group = self.group(pack.active, mode)
        dialogue = Dialogue([Turn("user", text)])
        for persona in pack.active:
            msgs = group.speaker.messages(persona, pack.active, dialogue, None)
            self.backend.generate([msgs], GenerationParams(max_new_tokens=1, temperature=0.0),
                                  adapter=group.speaker.adapter_for(persona))
        group.director.decide(DirectorState(dialogue, pack.active, 0))
        return time.perf_counter() - t

    def group(self, roster: list[Persona], mode: str, **kwargs: object) -> GroupChat:
        """A GroupChat for one session over the shared backend."""
        return GroupChat(self.backend, roster, mode=mode, **kwargs)  # type: ignore[arg-type]


_ENGINES: dict[EngineConfig, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def get_engine(config: EngineConfig) -> Engine:
    """Load (once per process) and return the engine for `config`."""
    with _ENGINES_LOCK:
        if config not in _ENGINES:
            backend = load_backend(
                config.backend, model=config.model, dtype=config.dtype, device=config.device,
                base_url=config.base_url, api_key=config.api_key,
            )
            _ENGINES[config] = Engine(config, backend, run_dir=find_run(config.checkpoints_dir, config.run))
        return _ENGINES[config]
