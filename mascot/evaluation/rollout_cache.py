"""Resuming an interrupted group evaluation: each finished batch of rollouts is kept on disk, keyed by everything
that made it, and a rerun with the same settings takes it from there instead of rolling it out again.

    python -m mascot eval --level group --cache runs/eval/group-cache ...   # interrupted after a few batches
    python -m mascot eval --level group --cache runs/eval/group-cache ...   # the same command: finished batches load

A batch's file name is a hash of the evaluation's settings (run folder and adapters, recipe, simulated user and
profile, turns, token budget), the system with the settings only it uses (min_speakers, for the LLM directors), and
each rollout's id, scenario and seed; a file from other settings is never read. Files are written whole (a temporary file renamed into place), so an interruption leaves no half batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.director import Decision
from mascot.group.rollouts import Rollout

VERSION = 1


class RolloutCache:
    """Finished rollout batches of one evaluation under `folder` (None: nothing is cached)."""

    def __init__(self, folder: str | Path | None, settings: dict[str, Any]) -> None:
        self.folder = Path(folder) if folder else None
        self.settings = settings
        self.loaded = self.saved = 0
        if self.folder is not None:
            if self.folder.exists() and not self.folder.is_dir():
                raise ConfigError(f"--cache {self.folder}: it is a file; give a folder for the cached dialogues.")
            self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, system: str, batch: list[Rollout], own: dict[str, Any] | None = None) -> Path | None:
        if self.folder is None:
            return None
        key = {"version": VERSION, "settings": self.settings, "system": system, "own": own or {},
               "rollouts": [[r.id, r.script.id, r.seed] for r in batch]}
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in system)
        return self.folder / f"{safe}-{digest}.json"

    def restore(self, system: str, batch: list[Rollout], own: dict[str, Any] | None = None) -> bool:
        """Fill `batch` from its cached file; False (and `batch` untouched) when there is none or it is unreadable.
        `own` holds settings that only some systems use (e.g. min_speakers for the LLM directors): a system that does
        not use one leaves it out, so its batches serve runs that differ only there."""
        path = self._path(system, batch, own)
        if path is None or not path.is_file():
            return False
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            rows = saved["rollouts"]
            if [row["id"] for row in rows] != [r.id for r in batch]:
                return False
            restored = [(Dialogue.from_dict(row["dialogue"]), [_decision(d) for d in row["decisions"]], row["notes"])
                        for row in rows]
        except (OSError, ValueError, KeyError, TypeError):
            return False  # a damaged file is rolled out again and rewritten
        for r, (dialogue, decisions, notes) in zip(batch, restored):
            r.dialogue, r.decisions, r.notes, r.done, r.awaiting_user = dialogue, decisions, list(notes), True, False
        self.loaded += 1
        return True

    def store(self, system: str, batch: list[Rollout], own: dict[str, Any] | None = None) -> None:
        """Write `batch` whole, replacing any earlier file of the same key."""
        path = self._path(system, batch, own)
        if path is None:
            return
        rows = [{"id": r.id, "dialogue": r.dialogue.to_dict(), "decisions": [_decision_dict(d) for d in r.decisions],
                 "notes": r.notes} for r in batch]
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"system": system, "rollouts": rows}, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.saved += 1


def _decision_dict(d: Decision) -> dict[str, Any]:
    directive = d.directive
    return {"directive": None if directive is None else {"speaker": directive.speaker, "action": directive.action,
                                                         "tone": directive.tone},
            "source": d.source, "raw": d.raw, "note": d.note}


def _decision(d: dict[str, Any]) -> Decision:
    return Decision(Directive(**d["directive"]) if d.get("directive") else None, d["source"], d.get("raw", ""),
                    d.get("note", ""))
