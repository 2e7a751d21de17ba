"""Exports: judgments as CSV or JSONL (with system names resolved), preference pairs for reward models.

CSV cells that a spreadsheet would run as a formula (annotator ids, comments, system names starting
with = + - @ tab or CR) are written with a leading apostrophe; JSONL keeps every value as is.

`export_preferences` writes `{prompt, chosen, rejected}` rows (TRL's preference format): one row per
decisive judgment on an ordinary item; ties, both-bad votes and attention checks are skipped.
"""

from __future__ import annotations

import csv
import json
from typing import Any, Literal, TextIO

import pandas as pd

from annotation.frames import RATING_COLUMNS, load_judgments
from annotation.store import StudyStore

CSV_COLUMNS = (
    (
        "judgment_id",
        "item_id",
        "annotator",
        "system_a",
        "system_b",
        "choice",
        "winner",
        "loser",
        "left_system",
    )
    + RATING_COLUMNS
    + (
        "comment",
        "seconds",
        "too_fast",
        "attention_passed",
        "is_attention",
        "leak_terms",
        "source",
        "created_at",
    )
)


def _value(v: Any) -> Any:
    """JSON/CSV-friendly scalar: NaN/NaT -> None, numpy -> Python, datetime -> ISO text."""
    if v is None or (not isinstance(v, (str, bytes, list, dict)) and pd.isna(v)):
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v.item() if hasattr(v, "item") else v


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """Neutralise spreadsheet formula injection: text cells starting with = + - @ tab or CR get a
    leading apostrophe (OWASP's advice), so a spreadsheet shows them as text instead of running them."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def render_dialogue(turns_json: str) -> str:
    """Stored turns -> 'Speaker: text' lines (the text form used for preference pairs)."""
    return "\n".join(
        f"{t['speaker']}: {t['text']}" if t["speaker"] else t["text"] for t in json.loads(turns_json)
    )


def export_judgments(store: StudyStore, *, study_id: str, fmt: Literal["csv", "jsonl"], out: TextIO) -> int:
    """Write every judgment of a study to `out`; JSONL rows also carry context, dialogues and meta."""
    frame = load_judgments(store, study_id=study_id, with_text=fmt == "jsonl")
    if fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for row in frame[list(CSV_COLUMNS)].itertuples(index=False):
            writer.writerow(["" if _value(v) is None else csv_safe(_value(v)) for v in row])
    elif fmt == "jsonl":
        for record in frame.to_dict(orient="records"):
            record = {k: _value(v) for k, v in record.items()}
            for key in ("dialogue_a", "dialogue_b", "meta"):
                record[key] = json.loads(record[key])
            record["study_id"] = study_id
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"Unknown export format {fmt!r}: use 'csv' or 'jsonl'.")
    return len(frame)


def export_preferences(store: StudyStore, *, study_id: str, out: TextIO) -> int:
    """Write `{prompt, chosen, rejected}` JSONL rows for reward-model / DPO training; returns the count."""
    frame = load_judgments(store, study_id=study_id, with_text=True)
    frame = frame[frame.winner.notna() & ~frame.is_attention]
    for row in frame.itertuples(index=False):
        a, b = render_dialogue(row.dialogue_a), render_dialogue(row.dialogue_b)
        chosen, rejected = (a, b) if row.choice == "a" else (b, a)
        out.write(
            json.dumps({"prompt": row.context, "chosen": chosen, "rejected": rejected}, ensure_ascii=False)
            + "\n"
        )
    return len(frame)
