"""Readers for the paper's datasets in their original release formats, from local paths only.

- Empathetic Dialogues: the CSV release (`train.csv`/`valid.csv`/`test.csv`, commas in text escaped
  as `_comma_`). One scenario per conversation: the situation prompt plus the first utterance.
- ESConv: `ESConv.json`, a list of dialogues. One scenario per dialogue: the seeker's opening.
- QMSum: JSONL, one meeting per line. One scenario per query, over a transcript excerpt.

Nothing is downloaded: a missing or malformed file raises DatasetError naming the path, the format
expected and where to obtain the dataset.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from mascot.data.scenario import ED_EMOTIONS, Scenario, valence_of
from mascot.errors import ConfigError
from mascot.group.dialogue import USER

log = logging.getLogger(__name__)


class DatasetError(ConfigError):
    """A dataset file is missing or not in the expected format."""


ED_COLUMNS = ("conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags")
ED_SOURCE = (
    "Empathetic Dialogues: https://github.com/facebookresearch/EmpatheticDialogues "
    "(archive https://dl.fbaipublicfiles.com/parlai/empatheticdialogues/empatheticdialogues.tar.gz; "
    "unpack it and pass the `empatheticdialogues/` folder or one of its CSV files)"
)
ESCONV_SOURCE = (
    "ESConv: https://github.com/thu-coai/Emotional-Support-Conversation (the file ESConv.json)"
)
QMSUM_SOURCE = (
    "QMSum: https://github.com/Yale-LILY/QMSum (data/ALL/jsonl/{train,val,test}.jsonl, or the per-domain "
    "folders data/Academic|Committee|Product/jsonl/)"
)
ED_FORMAT = f"a CSV with the header {','.join(ED_COLUMNS)} (commas inside text written as _comma_)"
ESCONV_FORMAT = (
    "a JSON list of dialogues, each with emotion_type, problem_type, situation and "
    "dialog: [{speaker: seeker|supporter, content, annotation}]"
)
QMSUM_FORMAT = (
    "JSONL, one meeting per line with meeting_transcripts: [{speaker, content}], "
    "general_query_list: [{query, answer}] and specific_query_list: [{query, answer, relevant_text_span}]"
)
QMSUM_DOMAINS = ("academic", "committee", "product")


def _fail(path: Path, problem: str, expected: str, source: str) -> DatasetError:
    return DatasetError(f"{path}: {problem}. Expected {expected}. Get it from {source}; nothing is downloaded at run time.")


def _files(path: Path, pattern: str, expected: str, source: str) -> list[Path]:
    """`path` itself, or the matching files below a folder, sorted; raises if there are none."""
    if not path.exists():
        raise _fail(path, "does not exist", expected, source)
    if path.is_file():
        return [path]
    found = sorted(p for p in path.rglob(pattern) if p.is_file())
    if not found:
        raise _fail(path, f"is a folder without any {pattern} file", expected, source)
    return found


def _split_from_name(path: Path) -> str:
    """`test*.csv/jsonl` is held out; train and validation files count as training data."""
    return "test" if path.stem.lower().startswith("test") else "train"


# ------------------------------------------------------------------ Empathetic Dialogues
def _ed_unescape(text: str) -> str:
    return text.replace("_comma_", ",").strip()


def read_ed_rows(path: Path) -> list[dict[str, str]]:
    """Rows of one ED CSV file as dicts. The release is not quoted CSV: fields are split on commas
    (the official reader does `line.split(",")`) and extra trailing fields are ignored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise _fail(path, f"is not UTF-8 text ({exc.reason})", ED_FORMAT, ED_SOURCE) from exc
    if not lines:
        raise _fail(path, "is empty", ED_FORMAT, ED_SOURCE)
    header = [h.strip() for h in lines[0].split(",")]
    missing = [c for c in ED_COLUMNS[:6] if c not in header]
    if missing:
        raise _fail(path, f"header lacks column(s) {', '.join(missing)} (found: {','.join(header)[:120]})", ED_FORMAT, ED_SOURCE)
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split(",")
        if len(parts) < 6:
            raise _fail(path, f"line {lineno} has {len(parts)} fields, fewer than the 6 required", ED_FORMAT, ED_SOURCE)
        row = {h: parts[i] if i < len(parts) else "" for i, h in enumerate(header)}
        if not row["utterance_idx"].strip().isdigit():
            raise _fail(path, f"line {lineno}: utterance_idx {row['utterance_idx']!r} is not an integer", ED_FORMAT, ED_SOURCE)
        row["_line"] = str(lineno)
        rows.append(row)
    if not rows:
        raise _fail(path, "has a header but no rows", ED_FORMAT, ED_SOURCE)
    return rows


def load_empathetic_dialogues(path: str | Path, split: str | None = None) -> list[Scenario]:
    """Empathetic Dialogues scenarios from the release folder or one of its CSV files.

    Each conversation becomes one scenario: the situation (`prompt`) and the first utterance of
    the person who lived it (the user). The split comes from the file name (test*.csv is test).
    """
    path = Path(path)
    scenarios: list[Scenario] = []
    for file in _files(path, "*.csv", ED_FORMAT, ED_SOURCE):
        file_split = _split_from_name(file)
        convs: dict[str, list[dict[str, str]]] = {}
        for row in read_ed_rows(file):
            convs.setdefault(row["conv_id"].strip(), []).append(row)
        for conv_id, rows in convs.items():
            rows.sort(key=lambda r: int(r["utterance_idx"]))
            first = rows[0]
            emotion = first["context"].strip().lower()
            if emotion not in ED_EMOTIONS:
                log.warning("%s line %s: emotion %r is not one of the 32 ED labels; valence left empty", file, first["_line"], emotion)
            utterance = _ed_unescape(first["utterance"])
            if not utterance:
                raise _fail(file, f"line {first['_line']}: conversation {conv_id} opens with an empty utterance", ED_FORMAT, ED_SOURCE)
            scenarios.append(Scenario(
                id="ed-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", conv_id), setting="emotional-support", source="empathetic_dialogues",
                situation=_ed_unescape(first["prompt"]), turns=[(USER, utterance)], emotion=emotion,
                valence=valence_of(emotion), split=file_split, meta={"file": file.name, "n_utterances": len(rows)},
            ))
    return [s for s in scenarios if split is None or s.split == split]


# ------------------------------------------------------------------------------ ESConv
ESCONV_MIN_WORDS = 12  # seeker text gathered until the opening says enough to respond to


def load_esconv(path: str | Path, split: str | None = None) -> list[Scenario]:
    """ESConv scenarios: the seeker's opening (seeker turns up to ~12 words, greetings skipped) with
    the dialogue's situation. ESConv is the out-of-domain set, so every scenario is `test`."""
    path = Path(path)
    file = _files(path, "*.json", ESCONV_FORMAT, ESCONV_SOURCE)[0]
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(file, f"is not valid JSON ({exc})", ESCONV_FORMAT, ESCONV_SOURCE) from exc
    if not isinstance(data, list) or not data:
        raise _fail(file, "does not hold a non-empty JSON list", ESCONV_FORMAT, ESCONV_SOURCE)
    scenarios = []
    for i, d in enumerate(data):
        where = f"dialogue [{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("dialog"), list):
            raise _fail(file, f"{where} has no 'dialog' list", ESCONV_FORMAT, ESCONV_SOURCE)
        for key in ("emotion_type", "situation"):
            if not isinstance(d.get(key), str):
                raise _fail(file, f"{where} lacks the string field '{key}'", ESCONV_FORMAT, ESCONV_SOURCE)
        seeker: list[str] = []
        for j, t in enumerate(d["dialog"]):
            if not isinstance(t, dict) or t.get("speaker") not in ("seeker", "supporter") or not isinstance(t.get("content"), str):
                raise _fail(file, f"{where} turn [{j}] needs speaker seeker|supporter and a content string", ESCONV_FORMAT, ESCONV_SOURCE)
            if t["speaker"] == "seeker":
                seeker.append(t["content"].strip())
                if len(" ".join(seeker).split()) >= ESCONV_MIN_WORDS:
                    break
            elif seeker and len(" ".join(seeker).split()) >= 4:
                break  # the supporter answered a real opening: stop before their reply
        if not seeker:
            raise _fail(file, f"{where} has no seeker turn", ESCONV_FORMAT, ESCONV_SOURCE)
        emotion = d["emotion_type"].strip().lower()
        scenarios.append(Scenario(
            id=f"esconv-{i:04d}", setting="emotional-support", source="esconv", situation=d["situation"].strip(),
            turns=[(USER, " ".join(seeker))], emotion=emotion, valence=valence_of(emotion) or "negative", split="test",
            meta={"problem_type": d.get("problem_type", ""), "experience_type": d.get("experience_type", "")},
        ))
    return [s for s in scenarios if split is None or s.split == split]


# ------------------------------------------------------------------------------- QMSum
EXCERPT_CHARS = 1200  # meeting context shown to speakers and judges; bounds prompt length


def _clean_qmsum(text: str) -> str:
    """Drop QMSum's transcription markers ({vocalsound}, {disfmarker}, ...) and squeeze spaces."""
    return re.sub(r"\s+", " ", re.sub(r"\{[a-z_]+\}", " ", text)).strip()


def _excerpt(transcript: list[dict[str, str]], span: tuple[int, int] | None, max_chars: int) -> str:
    start, end = span if span else (0, len(transcript) - 1)
    lines, size = [], 0
    for t in transcript[max(0, start) : end + 1]:
        line = f"{t['speaker']}: {_clean_qmsum(t['content'])}"
        if size + len(line) > max_chars and lines:
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _span(q: dict[str, Any]) -> tuple[int, int] | None:
    spans = q.get("relevant_text_span") or []
    try:
        return int(spans[0][0]), int(spans[0][1])
    except (IndexError, TypeError, ValueError):
        return None


def load_qmsum(path: str | Path, split: str | None = None, max_chars: int = EXCERPT_CHARS) -> list[Scenario]:
    """QMSum scenarios: one per query, the user asking it over a transcript excerpt (the query's
    relevant span when given, else the start of the meeting). The domain comes from the folder
    name (Academic/Committee/Product) or a `domain` key; the split from the file name."""
    path = Path(path)
    scenarios: list[Scenario] = []
    for file in _files(path, "*.jsonl", QMSUM_FORMAT, QMSUM_SOURCE):
        parts = [p.lower() for p in file.parts]
        folder_domain = next((d for d in QMSUM_DOMAINS if d in parts), "")
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                meeting = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(file, f"line {lineno} is not valid JSON ({exc.msg})", QMSUM_FORMAT, QMSUM_SOURCE) from exc
            transcript = meeting.get("meeting_transcripts") if isinstance(meeting, dict) else None
            if not isinstance(transcript, list) or not transcript or not all(
                isinstance(t, dict) and isinstance(t.get("speaker"), str) and isinstance(t.get("content"), str) for t in transcript
            ):
                raise _fail(file, f"line {lineno} lacks a meeting_transcripts list of {{speaker, content}}", QMSUM_FORMAT, QMSUM_SOURCE)
            queries = []
            for key in ("general_query_list", "specific_query_list"):
                for q in meeting.get(key) or []:
                    if not isinstance(q, dict) or not isinstance(q.get("query"), str):
                        raise _fail(file, f"line {lineno}: an entry of {key} has no 'query' string", QMSUM_FORMAT, QMSUM_SOURCE)
                    queries.append((key.split("_")[0], q))
            if not queries:
                raise _fail(file, f"line {lineno} has no queries in general_query_list or specific_query_list", QMSUM_FORMAT, QMSUM_SOURCE)
            domain = str(meeting.get("domain", "")).lower() or folder_domain
            for j, (kind, q) in enumerate(queries):
                label = f"{domain.capitalize() or 'Meeting'} meeting excerpt"
                scenarios.append(Scenario(
                    id=f"qmsum-{domain or 'all'}-{file.stem}-{lineno}-q{j}", setting="meeting", source="qmsum",
                    situation=f"{label}:\n{_excerpt(transcript, _span(q), max_chars)}", turns=[(USER, q['query'].strip())],
                    split=_split_from_name(file), domain=domain,
                    meta={"query_type": kind, "answer": q.get("answer", ""), "file": str(file.name)},
                ))
    return [s for s in scenarios if split is None or s.split == split]
