"""Import pairs (JSONL) and judgments collected elsewhere (CSV): validate every row, then all or nothing.

Any bad row raises `ImportValidationError` listing line numbers, and the database is left untouched.
Pairs line: {"id": "ed-001", "context": "...", "a": {"system": "MASCOT", "dialogue": [{"speaker":
"User", "text": "..."}]}, "b": {...}} plus optional "attention_check": true, "expected": "a", "meta": {}.
"""

from __future__ import annotations

import csv
import json
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from annotation.errors import ImportValidationError, InvalidInput
from annotation.identity import annotator_key, clean_annotator
from annotation.models import CRITERIA, Annotator, Assignment, Item, Judgment, System, utcnow
from annotation.pairs import parse_pair
from annotation.quality import find_system_mentions, is_too_fast
from annotation.schemas import ExternalJudgment, Ratings
from annotation.store import StudyStore

T = TypeVar("T")

JUDGMENT_REQUIRED = ("item_id", "annotator", "choice")
JUDGMENT_OPTIONAL = ("comment", "seconds", "left_system") + tuple(f"{c}_{s}" for c in CRITERIA for s in "ab")
CHOICE_ALIASES = {"tie": "tie", "both_bad": "both_bad", "both bad": "both_bad", "both-bad": "both_bad"}


@dataclass
class ImportReport:
    """What an import added, and the blinding warnings a researcher must look at."""

    added: int
    systems: list[str] = field(default_factory=list)
    leak_items: dict[str, list[str]] = field(default_factory=dict)  # item id -> system names found
    warnings: list[str] = field(default_factory=list)


def parse_lines(path: str | Path, parse: Callable[[str], T], id_of: Callable[[T], str], what: str) -> list[tuple[int, T]]:
    """Parse every non-blank line of a JSONL file (`parse` raises ValueError for a bad one), refusing duplicate ids;
    raises one ImportValidationError listing every bad line, so an import stores all lines or none."""
    problems: list[tuple[int, str]] = []
    parsed: list[tuple[int, T]] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = parse(line)
            except ValueError as exc:
                problems.append((number, str(exc)))
                continue
            key = id_of(row)
            if key in seen:
                problems.append((number, f"duplicate id {key!r} (first on line {seen[key]})"))
                continue
            seen[key] = number
            parsed.append((number, row))
    if not parsed and not problems:
        problems.append((1, f"the file has no {what}"))
    if problems:
        raise ImportValidationError(str(path), problems)
    return parsed


def import_pairs(store: StudyStore, *, study_id: str, path: str | Path) -> ImportReport:
    """Validate every line of a pairs JSONL file, then add all its items in one transaction."""
    parsed = parse_lines(path, parse_pair, lambda item: item.item_id, "pairs")

    def run(session: Session) -> ImportReport:
        study = store.study_row(session, study_id, lock=True)
        existing = set(session.scalars(select(Item.external_id).where(Item.study_id == study.id)))
        clashes = [
            (n, f"id {p.item_id!r} is already in study {study.id!r}")
            for n, p in parsed
            if p.item_id in existing
        ]
        if clashes:
            raise ImportValidationError(str(path), clashes)
        systems = {s.name: s for s in session.scalars(select(System).where(System.study_id == study.id))}
        for _, p in parsed:
            for name in (p.a.system, p.b.system):
                if name not in systems:
                    systems[name] = System(study_id=study.id, name=name)
                    session.add(systems[name])
        session.flush()
        report = ImportReport(added=len(parsed), systems=sorted(systems))
        for _, p in parsed:
            texts = [p.context] + [x for t in p.a.turns + p.b.turns for x in (t.speaker, t.text)]
            leaks = find_system_mentions(texts, systems)
            if leaks:
                report.leak_items[p.item_id] = leaks
            session.add(
                Item(
                    study_id=study.id,
                    external_id=p.item_id,
                    context=p.context,
                    system_a_id=systems[p.a.system].id,
                    system_b_id=systems[p.b.system].id,
                    dialogue_a=json.dumps([t.__dict__ for t in p.a.turns]),
                    dialogue_b=json.dumps([t.__dict__ for t in p.b.turns]),
                    is_attention=p.attention_check,
                    expected_choice=p.expected,
                    leak_terms=",".join(leaks),
                    meta=json.dumps(p.meta),
                )
            )
        if report.leak_items:
            shown = ", ".join(list(report.leak_items)[:5]) + ("..." if len(report.leak_items) > 5 else "")
            report.warnings.append(
                f"{len(report.leak_items)} item(s) name a system in their text ({shown}); names are masked "
                "as [system] for annotators, but check these items or drop them."
            )
        for text, what in ((study.instructions, "instructions"), (study.id, "study id")):
            leaks = find_system_mentions([text], systems)
            if leaks:
                report.warnings.append(
                    f"The {what} mentions {', '.join(leaks)}; annotators see it, so blinding is at risk."
                )
        return report

    return store.write(run)


def _rating(value: str, column: str) -> int | None:
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit() or not 1 <= int(value) <= 5:
        raise ValueError(f"{column}={value!r} must be a whole number 1-5 or empty")
    return int(value)


def _judgment_row(row: dict[str, str], item: Item | None, names: dict[int, str]) -> ExternalJudgment:
    """Validate one CSV row against its item; raises ValueError saying what is wrong."""
    if item is None:
        raise ValueError(f"item_id {row.get('item_id')!r} is not in this study; import its pair first")
    annotator = clean_annotator(row.get("annotator") or "")
    sides = {names[item.system_a_id].casefold(): "a", names[item.system_b_id].casefold(): "b"}
    raw = (row.get("choice") or "").strip()
    choice = sides.get(raw.casefold()) or CHOICE_ALIASES.get(raw.casefold())
    if choice is None:
        options = [names[item.system_a_id], names[item.system_b_id], "tie", "both_bad"]
        raise ValueError(f"choice {raw!r} is not one of {options}")
    left = (row.get("left_system") or "").strip()
    left_side = sides.get(left.casefold()) if left else None
    if left and left_side is None:
        raise ValueError(f"left_system {left!r} is neither system of item {item.external_id!r}")
    seconds = (row.get("seconds") or "").strip()
    try:
        took = float(seconds) if seconds else None
    except ValueError:
        raise ValueError(f"seconds={seconds!r} is not a number") from None
    ratings = {
        s: Ratings(**{c: _rating(row.get(f"{c}_{s}") or "", f"{c}_{s}") for c in CRITERIA}) for s in "ab"
    }
    return ExternalJudgment(
        item.external_id,
        annotator,
        choice,
        ratings["a"],
        ratings["b"],
        (row.get("comment") or "").strip(),
        took,
        left_side,
    )


def import_judgments(store: StudyStore, *, study_id: str, path: str | Path) -> ImportReport:
    """Validate every row of a judgments CSV against the study, then add them all in one transaction.

    Columns: item_id, annotator, choice (a system name, `tie` or `both_bad`); optional comment,
    seconds, left_system, and 1-5 ratings `<criterion>_a` / `<criterion>_b` (sides of the pairs file).
    """
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in JUDGMENT_REQUIRED if c not in header]
        # Unknown columns are named by position only: the header may be any text (even a file that
        # is not a CSV at all), and an error message must not echo a file's content.
        unknown = [i for i, c in enumerate(header, start=1) if c not in JUDGMENT_REQUIRED + JUDGMENT_OPTIONAL]
        if missing or unknown:
            raise ImportValidationError(
                str(path),
                [
                    (
                        1,
                        (f"header is missing {missing} " if missing else "")
                        + (f"has {len(unknown)} unknown column(s), at position(s) {unknown[:10]} " if unknown else "")
                        + f"(required: {list(JUDGMENT_REQUIRED)}; optional: {list(JUDGMENT_OPTIONAL)})",
                    )
                ],
            )
        rows = [(reader.line_num, {k.strip(): v for k, v in row.items() if k}) for row in reader]
    if not rows:
        raise ImportValidationError(str(path), [(1, "the file has no judgment rows")])

    def run(session: Session) -> ImportReport:
        study = store.study_row(session, study_id, lock=True)
        items = {i.external_id: i for i in session.scalars(select(Item).where(Item.study_id == study.id))}
        names = {s.id: s.name for s in session.scalars(select(System).where(System.study_id == study.id))}
        # By identity (annotation.identity): ALICE in the file is the alice already in the study.
        people = {a.match_key: a for a in session.scalars(select(Annotator).where(Annotator.study_id == study.id))}
        taken = set(
            session.execute(
                select(Item.external_id, Annotator.match_key)
                .join(Judgment, Judgment.item_id == Item.id)
                .join(Annotator, Annotator.id == Judgment.annotator_id)
                .where(Judgment.study_id == study.id)
            ).tuples()
        )
        problems: list[tuple[int, str]] = []
        valid: list[ExternalJudgment] = []
        for line, row in rows:
            try:
                j = _judgment_row(row, items.get((row.get("item_id") or "").strip()), names)
            except (ValueError, InvalidInput) as exc:
                problems.append((line, str(exc)))
                continue
            if (j.item_id, annotator_key(j.annotator)) in taken:
                problems.append((line, f"annotator {j.annotator!r} already judged item {j.item_id!r}"))
                continue
            taken.add((j.item_id, annotator_key(j.annotator)))
            valid.append(j)
        if problems:
            raise ImportValidationError(str(path), problems)
        now = utcnow()
        for j in valid:
            item = items[j.item_id]
            key = annotator_key(j.annotator)
            if key not in people:
                people[key] = Annotator(study_id=study.id, external_id=j.annotator, match_key=key, created_at=now)
                session.add(people[key])
                session.flush()
            a_left = None if j.left_side is None else j.left_side == "a"
            held = Assignment(
                token=secrets.token_hex(16),
                study_id=study.id,
                item_id=item.id,
                annotator_id=people[key].id,
                a_on_left=a_left,
                status="done",
                served_at=now,
                expires_at=now,
            )
            session.add(held)
            session.flush()
            session.add(
                Judgment(
                    assignment_id=held.id,
                    study_id=study.id,
                    item_id=item.id,
                    annotator_id=held.annotator_id,
                    choice=j.choice,
                    winner_system_id={"a": item.system_a_id, "b": item.system_b_id}.get(j.choice),
                    left_system_id=None
                    if a_left is None
                    else (item.system_a_id if a_left else item.system_b_id),
                    **{
                        f"{c}_{s}": getattr(r, c)
                        for s, r in (("a", j.ratings_a), ("b", j.ratings_b))
                        for c in CRITERIA
                    },
                    comment=j.comment,
                    seconds=j.seconds,
                    too_fast=is_too_fast(j.seconds, study.min_seconds),
                    attention_passed=(j.choice == item.expected_choice) if item.is_attention else None,
                    source="import",
                    created_at=now,
                )
            )
        for item_id, n in Counter(items[j.item_id].id for j in valid).items():
            session.execute(update(Item).where(Item.id == item_id).values(n_done=Item.n_done + n))
        return ImportReport(added=len(valid), systems=sorted(names.values()))

    return store.write(run)
