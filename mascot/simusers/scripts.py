"""Seeker scripts for the `replay` simulated user: the bundled scripts written for this project
(`seeker_scripts.yaml`, 44 train + 24 test) or the seeker turns of an ESConv-format file.

    load_scripts("bundled", split="test")            # the held-out scripts
    load_scripts("esconv:/path/ESConv.json")         # seekers with at least 2 turns (all in split `test`)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mascot.errors import ConfigError

if TYPE_CHECKING:  # the dataclass lives in the package, which imports this module
    from mascot.simusers import SeekerScript

BUNDLED = Path(__file__).with_name("seeker_scripts.yaml")
SPLITS = ("train", "test", "all")


def _bundled() -> list[SeekerScript]:
    from mascot.simusers import SeekerScript

    rows = yaml.safe_load(BUNDLED.read_text(encoding="utf-8"))
    return [SeekerScript(id=r["id"], situation=r["situation"], turns=list(r["turns"]), emotion=r.get("emotion", ""),
                         split=r["split"]) for r in rows]


def _esconv(path: Path) -> list[SeekerScript]:
    from mascot.simusers import SeekerScript

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read ESConv file {path}: {exc}") from exc
    out = []
    for i, d in enumerate(data):
        turns = [t["content"].strip() for t in d.get("dialog", []) if t.get("speaker") == "seeker" and t.get("content", "").strip()]
        if len(turns) >= 2:
            out.append(SeekerScript(id=f"esconv-{i}", situation=d.get("situation", ""), turns=turns,
                                    emotion=d.get("emotion_type", ""), split="test", source="esconv"))
    return out


def _qmsum(path: Path | None) -> list[SeekerScript]:
    """One script per meeting: its questions in order (the general one first), the excerpts as the scene."""
    from mascot.data import BUNDLED_DIR, load_qmsum
    from mascot.simusers import SeekerScript

    by_meeting: dict[str, list] = {}
    for sc in load_qmsum(path or BUNDLED_DIR / "qmsum"):
        by_meeting.setdefault(sc.id.rsplit("-q", 1)[0], []).append(sc)
    out = []
    for mid, scs in by_meeting.items():
        scs.sort(key=lambda sc: int(sc.id.rsplit("-q", 1)[1]))
        situation = "\n".join(dict.fromkeys(sc.situation for sc in scs if sc.situation))
        out.append(SeekerScript(id=mid, situation=situation, turns=[sc.turns[-1][1] for sc in scs], split=scs[0].split,
                                setting="meeting", source="qmsum", meta={"domain": scs[0].group}))
    return out


def load_scripts(source: str = "bundled", split: str = "all", limit: int | None = None) -> list[SeekerScript]:
    """Seeker scripts from `bundled`, `esconv[:PATH]` (default: the bundled ESConv sample) or `qmsum[:PATH]` (one
    script per meeting, its questions as the user's turns; default: the bundled meetings), filtered by split."""
    if split not in SPLITS:
        raise ConfigError(f"Unknown split {split!r}. Valid splits: {', '.join(SPLITS)}.")
    if source == "bundled":
        scripts = _bundled()
    elif source.startswith("esconv"):
        _, _, path = source.partition(":")
        default = Path(__file__).resolve().parent.parent / "data" / "bundled" / "esconv" / "ESConv.json"
        scripts = _esconv(Path(path) if path else default)
    elif source.startswith("qmsum"):
        _, _, path = source.partition(":")
        scripts = _qmsum(Path(path) if path else None)
    else:
        raise ConfigError(f"Unknown seeker-script source {source!r}. Valid sources: bundled, esconv[:PATH], qmsum[:PATH].")
    if split != "all":
        scripts = [s for s in scripts if s.split == split]
    if not scripts:
        raise ConfigError(f"No seeker scripts of split {split!r} in {source!r}.")
    return scripts[:limit] if limit else scripts
