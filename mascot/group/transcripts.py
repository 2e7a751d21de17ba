"""Transcript export (JSON and Markdown) and import, shared by the chat UI and the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from mascot.group.dialogue import Dialogue
from mascot.group.personas import PersonaPack


def to_json(dialogue: Dialogue, pack: PersonaPack | None = None, **extra: Any) -> str:
    """A re-importable JSON document: dialogue, roster and settings."""
    doc: dict[str, Any] = {
        "format": "mascot-transcript/1",
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        **extra,
        "dialogue": dialogue.to_dict(),
    }
    if pack is not None:
        doc["pack"] = pack.name
        doc["personas"] = [p.to_dict() for p in pack.active]
    return json.dumps(doc, ensure_ascii=False, indent=2)


def from_json(text: str) -> Dialogue:
    """Read a dialogue back from `to_json` output."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or "dialogue" not in doc:
        raise ValueError("Not a MASCOT transcript: expected a JSON object with a 'dialogue' field.")
    return Dialogue.from_dict(doc["dialogue"])


def to_markdown(dialogue: Dialogue, pack: PersonaPack | None = None, include_directives: bool = True) -> str:
    """A readable Markdown transcript with speakers and (optionally) the director's directives."""
    lines = ["# MASCOT conversation", ""]
    if pack is not None:
        lines += [f"Group: **{pack.title}** — " + ", ".join(f"{p.name} ({p.role})" for p in pack.active), ""]
    for t in dialogue.turns:
        if include_directives and t.directive is not None:
            lines.append(f"> 🎬 *Director → {t.directive.speaker}: {t.directive.action} (tone: {t.directive.tone})*")
            lines.append("")
        who = "You" if t.is_user else t.speaker
        lines += [f"**{who}:** {t.text}", ""]
    return "\n".join(lines)
