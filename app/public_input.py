"""What the public chat accepts from a browser or an API client: bundled (or operator-registered) packs by
name, never a path, and `/chat` history of bounded size with only plain fields kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.settings import Settings
from mascot.errors import MascotError
from mascot.group.dialogue import Directive, Turn
from mascot.group.personas import PersonaPack, list_packs, load_pack


def registered_packs(settings: Settings) -> dict[str, str]:
    """Packs the server's operator registered by path (`MASCOT_PACK=/path/pack.yaml`): {name: path}.

    Public endpoints then accept that pack's *name*, like a bundled one, but never a path."""
    if not Path(settings.pack).suffix:
        return {}
    pack = load_pack(settings.pack)
    return {pack.name: settings.pack}


def load_public_pack(name: str | None, registered: dict[str, str] | None = None) -> PersonaPack:
    """A bundled (or operator-registered) pack by name; public endpoints never read a pack from a
    path they are given."""
    registered = registered or {}
    packs = list_packs()
    if isinstance(name, str) and name in registered:
        return load_pack(registered[name])
    if not isinstance(name, str) or name not in packs:
        shown = name if isinstance(name, str) and len(name) <= 60 else "(that value)"
        raise MascotError(f"Unknown persona pack {shown!r}. Choose one of: {', '.join([*packs, *registered])}.")
    return load_pack(name)


def _short_str(value: Any, limit: int, where: str) -> str:
    if not isinstance(value, str):
        raise MascotError(f"{where} must be a string.")
    if len(value) > limit:
        raise MascotError(f"{where} is {len(value):,} characters long; the limit is {limit:,}.")
    return value


def clean_history(history: Any, max_turns: int, max_chars: int) -> list[Turn]:
    """Validate `/chat` history: at most `max_turns` turns of at most `max_chars` characters each.

    Only `speaker`, `text` and the directive's three strings are kept; `meta` keeps plain scalars
    (never nested objects, so no file reference can ride along in a turn)."""
    if history is None:
        return []
    if not isinstance(history, list):
        raise MascotError("history must be a list of turns as returned by /chat.")
    if len(history) > max_turns:
        raise MascotError(f"history has {len(history):,} turns; the limit is {max_turns:,}. Start a new conversation.")
    turns: list[Turn] = []
    for i, raw in enumerate(history):
        where = f"history[{i}]"
        if not isinstance(raw, dict):
            raise MascotError(f"{where} must be a turn object with speaker and text.")
        speaker = _short_str(raw.get("speaker"), 100, f"{where}.speaker")
        text = _short_str(raw.get("text"), max_chars, f"{where}.text")
        d = raw.get("directive")
        directive = None
        if d:
            if not isinstance(d, dict):
                raise MascotError(f"{where}.directive must be an object with speaker, action and tone.")
            directive = Directive(*(_short_str(d.get(k, ""), 500, f"{where}.directive.{k}")
                                    for k in ("speaker", "action", "tone")))
        meta = raw.get("meta") or {}
        if not isinstance(meta, dict):
            raise MascotError(f"{where}.meta must be an object.")
        kept = {str(k)[:50]: v for k, v in list(meta.items())[:20]
                if v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 200)}
        turns.append(Turn(speaker=speaker, text=text, directive=directive, meta=kept))
    return turns
