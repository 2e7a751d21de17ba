"""The pairs file format (JSONL): one line -> a validated `PairItem`, or a ValueError saying what is wrong.

Line: {"id": "ed-001", "context": "...", "a": {"system": "MASCOT", "dialogue": [{"speaker": "User",
"text": "..."}]}, "b": {...}} plus optional "attention_check": true, "expected": "a", "meta": {}.
Turns may also use "role"/"name" and "content", or be plain strings; "context" may be a list of turns.
"""

from __future__ import annotations

import json
from typing import Any

from annotation.models import CHOICES
from annotation.schemas import PairItem, PairSide, Turn

PAIR_KEYS = {"id", "item_id", "context", "a", "b", "attention_check", "expected", "meta"}


def _turn(raw: Any) -> Turn:
    if isinstance(raw, str):
        return Turn("", raw)
    if isinstance(raw, dict):
        speaker = raw.get("speaker", raw.get("name", raw.get("role", "")))
        text = raw.get("text", raw.get("content"))
        if isinstance(speaker, str) and isinstance(text, str) and text.strip():
            return Turn(speaker.strip(), text)
    raise ValueError(f'bad turn {json.dumps(raw)[:80]}: use {{"speaker": "User", "text": "..."}}')


def _side(raw: Any, key: str) -> PairSide:
    if not isinstance(raw, dict):
        raise ValueError(f'"{key}" must be an object {{"system": NAME, "dialogue": [turns]}}')
    system = raw.get("system")
    turns = raw.get("dialogue", raw.get("turns"))
    if not isinstance(system, str) or not system.strip():
        raise ValueError(f'"{key}.system" must be a non-empty system name')
    if not isinstance(turns, list) or not turns:
        raise ValueError(f'"{key}.dialogue" must be a non-empty list of turns')
    return PairSide(system.strip(), tuple(_turn(t) for t in turns))


def json_object(line: str) -> dict[str, Any]:
    """One JSONL line as a JSON object; raises ValueError saying what is wrong."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(raw, dict):
        raise ValueError("each line must be one JSON object")
    return raw


def parse_pair(line: str) -> PairItem:
    """Parse one JSONL line into a `PairItem`; raises ValueError saying what is wrong."""
    raw = json_object(line)
    unknown = set(raw) - PAIR_KEYS
    if unknown:
        raise ValueError(
            f'unknown keys {sorted(unknown)}; allowed: {sorted(PAIR_KEYS)} (put extras in "meta")'
        )
    item_id = raw.get("id", raw.get("item_id"))
    if not isinstance(item_id, (str, int)) or not str(item_id).strip():
        raise ValueError('missing "id" (a string or number unique within the study)')
    context = raw.get("context", "")
    if isinstance(context, list):
        context = "\n".join(f"{t.speaker}: {t.text}" if t.speaker else t.text for t in map(_turn, context))
    if not isinstance(context, str):
        raise ValueError('"context" must be a string (or a list of turns)')
    a, b = _side(raw.get("a"), "a"), _side(raw.get("b"), "b")
    if a.system == b.system:
        raise ValueError(f"both sides come from system {a.system!r}; a pair compares two different systems")
    check = raw.get("attention_check", False)
    expected = raw.get("expected")
    if not isinstance(check, bool):
        raise ValueError('"attention_check" must be true or false')
    if check and expected not in CHOICES:
        raise ValueError(f'attention checks need "expected": one of {list(CHOICES)} (the known right answer)')
    if not check and expected is not None:
        raise ValueError('"expected" is only allowed with "attention_check": true')
    meta = raw.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError('"meta" must be a JSON object')
    return PairItem(str(item_id).strip(), context, a, b, check, expected, meta)
