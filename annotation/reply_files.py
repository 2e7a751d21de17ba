"""File formats of single-reply labelling: reply items (JSONL in), labels (JSONL or CSV in and out).

Reply item line: {"id": "r-001", "context": [{"speaker": "User", "text": "..."}], "persona": "Mia",
"persona_role": "Listener", "reply": "...", "system": "MASCOT"} plus optional "meta": {}.
Label row: id (the reply item's id), annotator, acceptability; optional persona_fit, faults (a JSON
list, or ';'-separated text in CSV) and comment. Parsers raise ValueError/InvalidInput naming the field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import pandas as pd

from annotation.errors import ImportValidationError
from annotation.exporting import csv_safe
from annotation.identity import clean_annotator
from annotation.pairs import json_object
from annotation.reply_labels import ReplyLabelValues, check_label
from annotation.schemas import Turn

ITEM_REQUIRED = ("id", "context", "persona", "persona_role", "reply", "system")
ITEM_KEYS = ITEM_REQUIRED + ("meta",)
MAX_NAME_CHARS = 200
LABEL_REQUIRED = ("id", "annotator", "acceptability")
LABEL_OPTIONAL = ("persona_fit", "faults", "comment")
# Columns of an export that an import reads past, so an exported file can be imported elsewhere.
LABEL_IGNORED = ("system", "persona", "persona_role", "context", "reply", "meta", "created_at")
# One row of `reply_label_rows`, and the columns of an export.
LABEL_ROW_COLUMNS = (
    "id", "system", "persona", "persona_role", "context", "reply", "meta",
    "annotator", "acceptability", "persona_fit", "faults", "comment", "created_at",
)


@dataclass(frozen=True)
class ReplyItemRow:
    """One validated line of a reply items file."""

    item_id: str
    context: tuple[Turn, ...]
    persona: str
    persona_role: str
    reply: str
    system: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LabelRow:
    """One validated label row, before its item id is looked up in the study."""

    item_id: str
    annotator: str
    values: ReplyLabelValues


def _name(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > MAX_NAME_CHARS:
        raise ValueError(f'"{key}" must be non-empty text of at most {MAX_NAME_CHARS} characters')
    return value.strip()


def _item_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise ValueError('"id" must be a non-empty string or number (the reply item id)')
    if len(str(value).strip()) > MAX_NAME_CHARS:
        raise ValueError(f'"id" is longer than {MAX_NAME_CHARS} characters')
    return str(value).strip()


def _context(raw: Any) -> tuple[Turn, ...]:
    if not isinstance(raw, list):
        raise ValueError('"context" must be a list of turns [{"speaker": "User", "text": "..."}] (may be empty)')
    turns = []
    for n, turn in enumerate(raw):
        if not isinstance(turn, dict) or set(turn) - {"speaker", "text"}:
            raise ValueError(f'"context[{n}]" must be an object with only "speaker" and "text"')
        speaker, text = turn.get("speaker", ""), turn.get("text")
        if not isinstance(speaker, str):
            raise ValueError(f'"context[{n}].speaker" must be text')
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f'"context[{n}].text" must be non-empty text')
        turns.append(Turn(speaker.strip(), text))
    return tuple(turns)


def parse_reply_item(line: str) -> ReplyItemRow:
    """Parse one JSONL line of a reply items file; raises ValueError naming the bad field."""
    raw = json_object(line)
    unknown = set(raw) - set(ITEM_KEYS)
    missing = [k for k in ITEM_REQUIRED if k not in raw]
    if unknown or missing:
        raise ValueError(
            (f"missing {missing} " if missing else "")
            + (f"unknown keys {sorted(unknown)} " if unknown else "")
            + f'(required: {list(ITEM_REQUIRED)}; optional: "meta", where extras go)'
        )
    reply = raw.get("reply")
    if not isinstance(reply, str) or not reply.strip():
        raise ValueError('"reply" must be non-empty text')
    role = raw.get("persona_role")
    if not isinstance(role, str) or len(role.strip()) > MAX_NAME_CHARS:
        raise ValueError(f'"persona_role" must be text of at most {MAX_NAME_CHARS} characters, e.g. "Listener"')
    meta = raw.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError('"meta" must be a JSON object')
    return ReplyItemRow(
        _item_id(raw.get("id")), _context(raw.get("context")), _name(raw, "persona"), role.strip(), reply,
        _name(raw, "system"), meta,
    )


def parse_label_row(raw: dict[str, Any]) -> LabelRow:
    """Validate one label row (from JSONL or CSV); raises ValueError/InvalidInput naming the field."""
    annotator = raw.get("annotator")
    if isinstance(annotator, int) and not isinstance(annotator, bool):
        annotator = str(annotator)
    values = check_label(raw.get("acceptability"), raw.get("persona_fit"), raw.get("faults"), raw.get("comment"))
    return LabelRow(_item_id(raw.get("id")), clean_annotator(annotator), values)  # type: ignore[arg-type]


def _header_problem(header: list[str]) -> str | None:
    missing = [c for c in LABEL_REQUIRED if c not in header]
    # Unknown columns are named by position only: an error message must not echo a file's content.
    known = LABEL_REQUIRED + LABEL_OPTIONAL + LABEL_IGNORED
    unknown = [i for i, c in enumerate(header, start=1) if c not in known]
    if not missing and not unknown:
        return None
    return (
        (f"header is missing {missing} " if missing else "")
        + (f"has {len(unknown)} unknown column(s), at position(s) {unknown[:10]} " if unknown else "")
        + f"(required: {list(LABEL_REQUIRED)}; optional: {list(LABEL_OPTIONAL)})"
    )


def label_file_format(path: str | Path) -> Literal["csv", "jsonl"]:
    """"csv" for a .csv file, "jsonl" for .jsonl/.json; otherwise guessed from the first character."""
    suffix = Path(path).suffix.casefold()
    if suffix in (".csv", ".jsonl", ".json"):
        return "csv" if suffix == ".csv" else "jsonl"
    with open(path, encoding="utf-8") as fh:
        start = fh.read(256).lstrip()
    return "jsonl" if start.startswith("{") else "csv"


def read_label_rows(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, raw row) for every label in a JSONL or CSV file; bad lines or header raise."""
    rows: list[tuple[int, dict[str, Any]]] = []
    problems: list[tuple[int, str]] = []
    if label_file_format(path) == "csv":
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            problem = _header_problem([h.strip() for h in reader.fieldnames or []])
            if problem:
                raise ImportValidationError(str(path), [(1, problem)])
            rows = [(reader.line_num, {k.strip(): v for k, v in row.items() if k}) for row in reader]
    else:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError as exc:
                    problems.append((number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
                    continue
                if not isinstance(raw, dict):
                    problems.append((number, "each line must be one JSON object"))
                    continue
                missing = [k for k in LABEL_REQUIRED if k not in raw]
                unknown = sorted(set(raw) - set(LABEL_REQUIRED + LABEL_OPTIONAL + LABEL_IGNORED))
                if missing or unknown:
                    problems.append((number, (f"missing keys {missing} " if missing else "")
                                     + (f"unknown keys {unknown} " if unknown else "")
                                     + f"(required: {list(LABEL_REQUIRED)}; optional: {list(LABEL_OPTIONAL)})"))
                    continue
                rows.append((number, raw))
    if problems:
        raise ImportValidationError(str(path), problems)
    if not rows:
        raise ImportValidationError(str(path), [(1, "the file has no label rows")])
    return rows


def _cell(value: Any) -> Any:
    """JSON/CSV-friendly scalar: NaN/NaT -> None, numpy -> Python, datetime -> ISO text."""
    if value is None or (not isinstance(value, (str, list, dict, tuple)) and pd.isna(value)):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value.item() if hasattr(value, "item") else value


def write_label_rows(frame: pd.DataFrame, fmt: Literal["csv", "jsonl"], out: TextIO) -> int:
    """Write label rows (`reply_label_rows`): CSV with context as JSON text and faults ';'-joined, or JSONL."""
    records: Iterable[dict[str, Any]] = (
        {k: _cell(v) for k, v in r.items()} for r in frame[list(LABEL_ROW_COLUMNS)].to_dict(orient="records")
    )
    if fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(LABEL_ROW_COLUMNS)
        for r in records:
            r["context"] = json.dumps(r["context"], ensure_ascii=False)
            r["meta"] = json.dumps(r["meta"], ensure_ascii=False)
            r["faults"] = ";".join(r["faults"])
            writer.writerow(["" if r[c] is None else csv_safe(r[c]) for c in LABEL_ROW_COLUMNS])
    elif fmt == "jsonl":
        for r in records:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"Unknown export format {fmt!r}: use 'csv' or 'jsonl'.")
    return len(frame)
