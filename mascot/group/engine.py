"""The engine: one backend (loaded once, shared by all sessions), the adapters found in `checkpoints/`,
the crisis detector with its event log, and a factory for per-session GroupChats."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mascot.backends import Backend, load_backend
from mascot.errors import InputError, MascotError
from mascot.files.checkpoints import (
    director_adapter_dir,
    find_run,
    is_adapter,
    persona_adapter_path,
    speaker_adapter_dir,
)
from mascot.group.chat import GroupChat
from mascot.group.director import DIRECTOR_ADAPTER
from mascot.group.live import LiveRun, LiveRuns
from mascot.group.personas import Persona, PersonaPack
from mascot.group.speaker import adapter_name
from mascot.safety.detector import CrisisDetector
from mascot.safety.events import SafetyLog
from mascot.settings import BACKEND_FIELDS, REPLY_MODES, backend_options

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
    cache_dir: str | None = None  # converted models and GGUF LoRAs (Settings.cache_dir)
    llamacpp_weights: str = "auto"
    llamacpp_decode_weights: str = "auto"
    llamacpp_threads: int = 0  # 0: calibrated at load
    llamacpp_omp_wait_policy: str = ""
    llamacpp_probe: bool = True
    llamacpp_keep_prefixes: bool = True

    @classmethod
    def from_settings(cls, settings: object, **fields: object) -> EngineConfig:
        """The engine part of a `mascot.settings.Settings` (or the app's), plus explicit fields."""
        values = {n: getattr(settings, n) for n in BACKEND_FIELDS if hasattr(settings, n)}
        return cls(**{**values, **fields})  # type: ignore[arg-type]

    def backend_options(self) -> dict[str, object]:
        return {"model": self.model, "dtype": self.dtype, "device": self.device, "base_url": self.base_url,
                "api_key": self.api_key, **backend_options(self)}


@dataclass
class Engine:
    """A loaded backend plus the warnings raised while attaching adapters (shown in the UI)."""

    config: EngineConfig
    backend: Backend
    warnings: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    # Per pack: who fell back to the prompted base model (names only, no paths: shown in the public UI).
    fallbacks: dict[str, list[str]] = field(default_factory=dict)
    safety: CrisisDetector | None = None  # None: the process's shared detector, recording nothing
    llm_safety_judge: bool = False  # Settings.safety_llm_judge
    careful_best_of: int = 3  # Settings.careful_best_of: draws per turn in "careful" replies
    _selector: tuple | None = None  # (Selector or None, note), loaded on first careful turn
    _loaded_packs: dict[str, PersonaPack] = field(default_factory=dict)
    live: LiveRuns = field(init=False)  # the runs put live since start-up; new conversations get the current one
    _tried: set[str] = field(default_factory=set)  # the director adapter, once tried (attached or refused)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.live = LiveRuns(self.run_dir)

    @classmethod
    def load(cls, config: EngineConfig, safety: CrisisDetector | None = None, llm_safety_judge: bool = False,
             careful_best_of: int = 3) -> Engine:
        """Load the backend and find the run whose adapters the chat uses."""
        backend = load_backend(config.backend, **config.backend_options())
        return cls(config, backend, run_dir=find_run(config.checkpoints_dir, config.run), safety=safety,
                   llm_safety_judge=llm_safety_judge, careful_best_of=careful_best_of)

    def attach_adapters(self, pack: PersonaPack) -> list[str]:
        """Load each persona's LoRA (and the director's) onto the shared base, once per pack.

        A missing or ill-fitting adapter gives a warning and that persona runs prompted instead.
        """
        with self._lock:
            if pack.name in self._loaded_packs:
                return []
            self._loaded_packs[pack.name] = pack
            new: list[str] = []
            fell_back = self.fallbacks.setdefault(pack.name, [])
            run_dir, missing = self.speakers_run_dir(pack)
            new += missing
            for p in pack.personas:
                found = self.attach_persona(p, run_dir)
                new += found
                fell_back += [p.name] if found else []
            found = self.attach_director()
            new += found
            fell_back += ["the director"] if found else []
            self.warnings += new
            return new

    def attach_director(self) -> list[str]:
        """Load the run's director adapter once (the `trained` director mode runs on it)."""
        with self._lock:
            if self.run_dir is None or DIRECTOR_ADAPTER in self.backend.adapters or DIRECTOR_ADAPTER in self._tried:
                return []
            self._tried.add(DIRECTOR_ADAPTER)
            d = director_adapter_dir(self.run_dir)
            return self._try_add(DIRECTOR_ADAPTER, d, "the director") if is_adapter(d) else []

    def speakers_run_dir(self, pack: PersonaPack) -> tuple[Path | None, list[str]]:
        """The run whose speakers/ hold `pack`'s adapters: the engine's run when it has one for any of the pack's
        personas (a run chosen with --run wins), else the pack's `speakers_run`; a named run that is not there gives
        a warning, and the pack's personas run prompted."""
        own = self.run_dir is not None and any(is_adapter(speaker_adapter_dir(self.run_dir, p)) for p in pack.personas)
        if own or not pack.speakers_run:
            return self.run_dir, []
        found = find_run(self.config.checkpoints_dir, pack.speakers_run)
        if found is None:
            msg = (f"Pack {pack.name!r}: its speakers_run {pack.speakers_run!r} is not in {self.config.checkpoints_dir}; "
                   "its personas run on the prompted base model.")
            log.warning(msg)
            return None, [msg]
        return found, []

    def attach_persona(self, persona: Persona, run_dir: Path | None = None) -> list[str]:
        name = adapter_name(persona)
        if name in self.backend.adapters:
            return []
        path = persona_adapter_path(persona, run_dir if run_dir is not None else self.run_dir)
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

    def warm_up(self, pack: PersonaPack, mode: str = "trained", replies: str = "fast") -> float:
        """Pay the first chat turn's one-off costs now: the safety classifiers, each speaker's cached persona
        prompt, the director's scoring prompt and, for careful replies, the acceptability scorer. Nothing is
        logged. Returns the seconds it took.

        On the llamacpp backend this takes the first turn's first token from seconds to under half a second."""
        import time

        from mascot.backends.base import GenerationParams
        from mascot.group.dialogue import Dialogue, Turn
        from mascot.group.director import DirectorState
        from mascot.safety.detector import default_detector

        t = time.perf_counter()
        self.attach_adapters(pack)
        text = pack.starters[0] if pack.starters else "Hello."
        detector = self.safety or default_detector()
        detector.check(text, record=False)
        detector.check_reply("That sounds hard. I am here with you.", record=False)
        group = self.group(pack.active, mode)
        dialogue = Dialogue([Turn("user", text)])
        for persona in pack.active:
            msgs = group.speaker.messages(persona, pack.active, dialogue, None)
            # where the reply mode draws: careful replies in the batch context (two one-token draws keep each
            # persona's prefix there, restored from disk where the backend keeps prefixes), fast ones in the chat's
            # cache slots
            chats = [msgs, msgs] if replies == "careful" else [msgs]
            self.backend.generate(chats, GenerationParams(max_new_tokens=1, temperature=0.0),
                                  adapter=group.speaker.adapter_for(persona))
        group.director.decide(DirectorState(dialogue, pack.active, 0))
        selector = self.selector()[0] if replies == "careful" else None
        if selector is not None:
            selector.scorer.score(dialogue, pack.active[0].name, ["That sounds hard. I am here with you."])
        return time.perf_counter() - t

    def selector(self):  # type: ignore[no-untyped-def]
        """(the acceptability selector or None, a note for the status area when it could not load), loaded once."""
        with self._lock:
            if self._selector is None:
                from mascot.acceptability.selection import load_selector

                self._selector = load_selector()
            return self._selector

    def put_live(self, run_dir: Path) -> LiveRun:
        """Load a run's speaker and director adapters for every pack in use, under the next version's names, and
        give them to new conversations; conversations in progress keep theirs (`mascot.group.live`)."""
        from mascot.group.personas import load_pack

        with self._lock:
            packs = list(self._loaded_packs.values()) or [load_pack("emotional-support")]
            return self.live.put(self.backend, run_dir, packs)

    def roll_back(self) -> LiveRun:
        """New conversations get the version that was live before the current one."""
        with self._lock:
            return self.live.roll_back()

    def group(self, roster: list[Persona], mode: str, replies: str = "fast", version: int | None = None,
              **kwargs: object) -> GroupChat:
        """A GroupChat for one session over the shared backend, on the adapters of live version `version` (the
        current one for None). The roster's adapters (and, for the `trained` mode, the director's) are attached
        first, so no caller has to remember to. `replies="careful"` shows the best of `careful_best_of` draws by
        the acceptability scorer (the first draw when it cannot load)."""
        live = self.live.get(version)
        kwargs.setdefault("adapter_names", live.names)
        if mode == "trained" and "director" not in live.names:
            self.attach_director()
        if replies not in REPLY_MODES:
            raise InputError(f"Unknown replies setting {replies!r}: use one of {', '.join(REPLY_MODES)}.")
        if replies == "careful":
            selector, _note = self.selector()
            if selector is not None:
                kwargs.setdefault("best_of", self.careful_best_of)
                kwargs.setdefault("selector", selector)
        kwargs.setdefault("safety", self.safety)
        kwargs.setdefault("llm_safety_judge", self.llm_safety_judge)
        return GroupChat(self.backend, roster, mode=mode, **kwargs)  # type: ignore[arg-type]


def live_detector(settings: object) -> CrisisDetector:
    """The crisis detector of a live chat: the shipped classifiers (loaded on first use, or by the warm-up),
    recording every decision (tier, score and layer, never the text) in the settings' safety log, where the
    researcher app's Safety tab reads."""
    return CrisisDetector(events=SafetyLog(settings.safety_log))
