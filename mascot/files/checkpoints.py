"""Where trained adapters live: `checkpoints/<run>/{speakers/<persona>,reward_model,director}/`.

Every folder is a standard PEFT adapter (adapter_config.json + weights). `find_run` picks the run
the chat uses: the one named, else `tiny-cpu` (shipped), else the newest run with adapters.
"""

from __future__ import annotations

import json
from pathlib import Path

from mascot.group.personas import Persona

DEFAULT_RUN = "tiny-cpu"


def is_adapter(path: Path) -> bool:
    return (path / "adapter_config.json").exists()


def base_model_of(adapter: Path) -> str:
    """The base model an adapter folder was trained on (its adapter_config.json)."""
    return str(json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path"))


def speakers_dir(run_dir: Path) -> Path:
    return run_dir / "speakers"


def speaker_adapter_dir(run_dir: Path, persona: Persona) -> Path:
    return speakers_dir(run_dir) / persona.key


def director_adapter_dir(run_dir: Path) -> Path:
    return run_dir / "director"


def reward_model_dir(run_dir: Path) -> Path:
    return run_dir / "reward_model"


def list_runs(checkpoints_dir: str | Path) -> list[Path]:
    """Runs that hold at least one speaker or director adapter, newest first."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return []
    runs = [
        d for d in root.iterdir()
        if d.is_dir() and (is_adapter(director_adapter_dir(d)) or any(is_adapter(s) for s in speakers_dir(d).glob("*")))
    ]
    return sorted(runs, key=lambda d: d.stat().st_mtime, reverse=True)


def find_run(checkpoints_dir: str | Path, run: str | None = None) -> Path | None:
    """The run directory the chat should use, or None when no trained adapters exist."""
    root = Path(checkpoints_dir)
    if run:
        path = Path(run) if Path(run).is_dir() else root / run
        return path if path.is_dir() else None
    if (root / DEFAULT_RUN).is_dir() and (root / DEFAULT_RUN) in list_runs(root):
        return root / DEFAULT_RUN
    runs = list_runs(root)
    return runs[0] if runs else None


def persona_adapter_path(persona: Persona, run_dir: Path | None, base_dir: str | Path = ".") -> Path | None:
    """A persona's adapter: its explicit `adapter` path (relative to base_dir) or the run's folder."""
    if persona.adapter:
        p = Path(persona.adapter)
        return p if p.is_absolute() else Path(base_dir) / p
    if run_dir is not None:
        p = speaker_adapter_dir(run_dir, persona)
        if is_adapter(p):
            return p
    return None
