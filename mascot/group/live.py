"""Runs put live in a running chat, without a restart.

Putting a run live loads its speaker and director adapters onto the shared backend under versioned names
(`speaker-anchor@v2`, `director@v2`). A new conversation takes the current version and keeps it to its end, so
a conversation in progress never changes weights halfway; rolling back makes the previous version current again.
Every version stays loaded, so conversations on any of them go on. Version 0 is the run the app started with,
under the plain names (`speaker-anchor`, `director`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mascot.backends import Backend
from mascot.errors import ConfigError, MascotError
from mascot.files.checkpoints import base_model_of, director_adapter_dir, is_adapter, speaker_adapter_dir
from mascot.group.director import DIRECTOR_ADAPTER
from mascot.group.personas import Persona, PersonaPack
from mascot.group.speaker import adapter_name


@dataclass(frozen=True)
class LiveRun:
    """One version of the chat's adapters: the run they come from and their backend names."""

    version: int
    run_dir: Path | None
    names: dict[str, str] = field(default_factory=dict)  # persona key or "director" -> adapter name ({}: plain names)

    @property
    def label(self) -> str:
        return f"{self.run_dir.name if self.run_dir else 'no run'} (v{self.version})"

    def speaker_adapter(self, persona: Persona) -> str:
        """The backend name of `persona`'s adapter in this version."""
        return self.names.get(persona.key) or adapter_name(persona)

    @property
    def director_adapter(self) -> str:
        return self.names.get("director", DIRECTOR_ADAPTER)


def run_adapters(run_dir: Path, packs: list[PersonaPack]) -> dict[str, tuple[str, Path]]:
    """Every adapter `run_dir` holds for `packs`' personas and the director: backend name (`speaker-<key>`,
    `director`) -> (persona key or "director", folder)."""
    found = {adapter_name(p): (p.key, speaker_adapter_dir(run_dir, p))
             for pack in packs for p in pack.personas if is_adapter(speaker_adapter_dir(run_dir, p))}
    if is_adapter(director_adapter_dir(run_dir)):
        found[DIRECTOR_ADAPTER] = ("director", director_adapter_dir(run_dir))
    return found


class LiveRuns:
    """The versions put live so far and which one new conversations get."""

    def __init__(self, start_run: Path | None) -> None:
        self.versions = [LiveRun(0, start_run)]
        self._current = [0]  # the versions made current, in order (roll back pops the last)

    @property
    def current(self) -> LiveRun:
        return self.versions[self._current[-1]]

    def get(self, version: int | None) -> LiveRun:
        """Version `version` (the current one for None); an unknown version is an error naming the valid ones."""
        if version is None:
            return self.current
        if not 0 <= version < len(self.versions):
            raise ConfigError(f"No live version {version}: versions 0 to {len(self.versions) - 1} exist.")
        return self.versions[version]

    def put(self, backend: Backend, run_dir: Path, packs: list[PersonaPack]) -> LiveRun:
        """Load `run_dir`'s adapters for `packs` under the next version's names and make it current; an adapter
        the run lacks stays the current version's. Nothing changes when any adapter fails to load, or when the run
        was trained on another base model."""
        run_dir = Path(run_dir)
        version = len(self.versions)
        wanted = run_adapters(run_dir, packs)
        if not wanted:
            raise ConfigError(f"{run_dir} holds no speaker or director adapter for "
                              f"{', '.join(p.name for p in packs)}: nothing to put live.")
        serving = {base_model_of(Path(path)) for path in backend.adapters.values() if is_adapter(Path(path))}
        bases = {base_model_of(folder) for _, folder in wanted.values()}
        if serving and bases - serving:
            raise ConfigError(f"{run_dir} was trained on {', '.join(sorted(bases))}, but the chat serves "
                              f"{', '.join(sorted(serving))}: its adapters do not fit this model. The live run is unchanged.")
        names: dict[str, str] = {}
        try:
            for plain, (key, folder) in wanted.items():
                name = f"{plain}@v{version}"
                backend.add_adapter(name, str(folder))
                names[key] = name
        except MascotError as exc:
            for name in names.values():
                backend.remove_adapter(name)
            raise ConfigError(f"{run_dir} cannot go live: {exc} The live run is unchanged.") from None
        # what the run does not hold (a speakers-only run: the director) stays as the current version has it
        self.versions.append(LiveRun(version, run_dir, {**self.current.names, **names}))
        self._current.append(version)
        return self.current

    def roll_back(self) -> LiveRun:
        """Make the version before the current one current again."""
        if len(self._current) == 1:
            raise ConfigError(f"Nothing to roll back: {self.current.label} is the run the chat started with.")
        self._current.pop()
        return self.current
