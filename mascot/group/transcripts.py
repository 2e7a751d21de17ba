"""Transcript export (JSON and Markdown) and import, shared by the chat UI and the CLI."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from mascot.group.dialogue import Dialogue
from mascot.group.personas import PersonaPack

# What lets supplied text become a tag, an entity, a link or an image, or end a code span early.
_MARKDOWN_ACTIVE = re.compile(r"[\\`\[\]]")
_HTML_ACTIVE = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(text: object) -> str:
    """Supplied text (a message, a name, a directive) as inert Markdown: `<`, `>` and `&` become entities,
    backslashes, backticks and brackets are backslash-escaped; everything else reads as written."""
    escaped = _MARKDOWN_ACTIVE.sub(lambda m: "\\" + m.group(0), str(text))
    return "".join(_HTML_ACTIVE.get(ch, ch) for ch in escaped)


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
    """A readable Markdown transcript with speakers and (optionally) the director's directives.

    Every supplied string goes through `md_text`, so a Markdown viewer shows it as text and runs no tag."""
    lines = ["# MASCOT conversation", ""]
    if pack is not None:
        roster = ", ".join(f"{md_text(p.name)} ({md_text(p.role)})" for p in pack.active)
        lines += [f"Group: **{md_text(pack.title)}** — {roster}", ""]
    for t in dialogue.turns:
        if include_directives and t.directive is not None:
            d = t.directive
            lines.append(f"> 🎬 *Director → {md_text(d.speaker)}: {md_text(d.action)} (tone: {md_text(d.tone)})*")
            lines.append("")
        who = "You" if t.is_user else md_text(t.speaker)
        lines += [f"**{who}:** {md_text(t.text)}", ""]
    return "\n".join(lines)
