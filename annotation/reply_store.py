"""Single-reply labels in a study's database: import reply items and labels, add one label, read them back.

Imports validate every row first and then write in one transaction (all rows or none), raising
`ImportValidationError` with line numbers. The reply's `system` is stored for analysis only; nothing
here hands it to an annotator. File formats: `annotation.reply_files`; vocabularies:
`annotation.reply_labels`; summary statistics: `annotation.reply_stats`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from annotation.errors import ImportValidationError, InvalidInput, StudyClosed
from annotation.identity import annotator_key, clean_annotator
from annotation.importing import ImportReport, parse_lines
from annotation.models import ReplyItem, ReplyLabel
from annotation.quality import find_system_mentions
from annotation.reply_files import (
    LABEL_ROW_COLUMNS,
    parse_label_row,
    parse_reply_item,
    read_label_rows,
)
from annotation.reply_labels import check_label
from annotation.store import StudyStore


def _spellings(session: Session, study_id: str) -> dict[str, str]:
    """Identity (`annotator_key`) -> the spelling a study's labels store it under (the first one seen), so that
    `ALICE` and `alice` label as one annotator."""
    names = session.scalars(
        select(ReplyLabel.annotator).where(ReplyLabel.study_id == study_id).group_by(ReplyLabel.annotator)
        .order_by(func.min(ReplyLabel.id))
    )
    spellings: dict[str, str] = {}
    for name in names:
        spellings.setdefault(annotator_key(name), name)
    return spellings


def import_reply_items(store: StudyStore, study_id: str, path: str | Path) -> ImportReport:
    """Validate every line of a reply items JSONL file, then add all of them in one transaction."""
    parsed = parse_lines(path, parse_reply_item, lambda row: row.item_id, "reply items")

    def run(session: Session) -> ImportReport:
        study = store.study_row(session, study_id, lock=True)
        existing = set(session.scalars(select(ReplyItem.external_id).where(ReplyItem.study_id == study.id)))
        clashes = [(n, f"id {r.item_id!r} is already in study {study.id!r}") for n, r in parsed if r.item_id in existing]
        if clashes:
            raise ImportValidationError(str(path), clashes)
        systems = set(session.scalars(select(ReplyItem.system).where(ReplyItem.study_id == study.id)))
        systems |= {r.system for _, r in parsed}
        report = ImportReport(added=len(parsed), systems=sorted(systems))
        for _, r in parsed:
            texts = [r.persona, r.persona_role, r.reply] + [x for t in r.context for x in (t.speaker, t.text)]
            leaks = find_system_mentions(texts, systems)
            if leaks:
                report.leak_items[r.item_id] = leaks
            session.add(
                ReplyItem(
                    study_id=study.id,
                    external_id=r.item_id,
                    context=json.dumps([t.__dict__ for t in r.context], ensure_ascii=False),
                    persona=r.persona,
                    persona_role=r.persona_role,
                    reply=r.reply,
                    system=r.system,
                    meta=json.dumps(r.meta, ensure_ascii=False),
                )
            )
        if report.leak_items:
            shown = ", ".join(list(report.leak_items)[:5]) + ("..." if len(report.leak_items) > 5 else "")
            report.warnings.append(
                f"{len(report.leak_items)} reply item(s) name a system in their text ({shown}); annotators "
                "would see the name, so check these items or drop them."
            )
        return report

    return store.write(run)


def import_reply_labels(store: StudyStore, study_id: str, path: str | Path) -> ImportReport:
    """Validate every row of a labels file (JSONL or CSV) against the study, then add all in one transaction.

    Rows: id (a reply item's id), annotator, acceptability; optional persona_fit, faults, comment.
    """
    rows = read_label_rows(path)

    def run(session: Session) -> ImportReport:
        study = store.study_row(session, study_id, lock=True)
        items = {
            i.external_id: i for i in session.scalars(select(ReplyItem).where(ReplyItem.study_id == study.id))
        }
        spellings = _spellings(session, study.id)
        taken = {
            (external, annotator_key(annotator)): "in the database"
            for external, annotator in session.execute(
                select(ReplyItem.external_id, ReplyLabel.annotator)
                .join(ReplyLabel, ReplyLabel.item_id == ReplyItem.id)
                .where(ReplyLabel.study_id == study.id)
            ).tuples()
        }
        problems: list[tuple[int, str]] = []
        valid = []
        for line, raw in rows:
            try:
                label = parse_label_row(raw)
            except (ValueError, InvalidInput) as exc:
                problems.append((line, str(exc)))
                continue
            if label.item_id not in items:
                problems.append(
                    (line, f"id {label.item_id!r} is not a reply item of study {study.id!r}; import it first "
                           "with import-replies")
                )
                continue
            label = replace(label, annotator=spellings.setdefault(annotator_key(label.annotator), label.annotator))
            key = (label.item_id, annotator_key(label.annotator))
            if key in taken:
                problems.append(
                    (line, f"annotator {label.annotator!r} already labelled item {label.item_id!r} ({taken[key]}); "
                           "each annotator labels an item once")
                )
                continue
            taken[key] = f"on line {line}"
            valid.append(label)
        if problems:
            raise ImportValidationError(str(path), problems)
        now = store.now()
        for label in valid:
            v = label.values
            session.add(
                ReplyLabel(
                    item_id=items[label.item_id].id,
                    study_id=study.id,
                    annotator=label.annotator,
                    acceptability=v.acceptability,
                    persona_fit=v.persona_fit,
                    faults=json.dumps(list(v.faults)),
                    comment=v.comment,
                    source="import",
                    created_at=now,
                )
            )
        return ImportReport(added=len(valid), systems=sorted({items[lb.item_id].system for lb in valid}))

    return store.write(run)


def add_reply_label(
    store: StudyStore,
    *,
    study_id: str,
    item_id: str,
    annotator: str,
    acceptability: str,
    persona_fit: str | None = None,
    faults: list[str] | tuple[str, ...] = (),
    comment: str = "",
) -> int:
    """Record one annotator's label of one reply item (what a labelling page calls); returns the label id.

    Raises:
        InvalidInput: a value outside the vocabulary (the message lists the valid ones), an unknown
            item, or a second label of the same item by the same annotator.
        StudyClosed: the study is closed.
    """
    values = check_label(acceptability, persona_fit, faults, comment)
    identity = annotator_key(annotator)

    def run(session: Session) -> int:
        study = store.study_row(session, study_id, lock=True)
        if not study.is_open:
            raise StudyClosed(f"Study {study_id!r} is closed and takes no new labels. Ask the researcher.")
        item = session.scalars(
            select(ReplyItem).where(ReplyItem.study_id == study.id, ReplyItem.external_id == str(item_id))
        ).first()
        if item is None:
            raise InvalidInput(f"No reply item {item_id!r} in study {study_id!r}; check the item id.")
        who = _spellings(session, study.id).get(identity, clean_annotator(annotator))
        labelled = session.scalars(select(ReplyLabel.annotator).where(ReplyLabel.item_id == item.id))
        if any(annotator_key(name) == identity for name in labelled):
            raise InvalidInput(f"Annotator {who!r} already labelled reply item {item_id!r}; each labels it once.")
        label = ReplyLabel(
            item_id=item.id,
            study_id=study.id,
            annotator=who,
            acceptability=values.acceptability,
            persona_fit=values.persona_fit,
            faults=json.dumps(list(values.faults)),
            comment=values.comment,
            source="app",
            created_at=store.now(),
        )
        session.add(label)
        session.flush()
        return label.id

    try:
        return store.write(run)
    except IntegrityError:  # a concurrent identical label won the unique constraint
        raise InvalidInput(
            f"Annotator {clean_annotator(annotator)!r} already labelled reply item {item_id!r}; each labels it once."
        ) from None


def reply_label_rows(store: StudyStore, study_id: str) -> pd.DataFrame:
    """Every label of a study joined with its reply item, oldest first (columns: `LABEL_ROW_COLUMNS`).

    `context` is a list of {"speaker", "text"} turns, `meta` the item's object, `faults` a list of fault names, `persona_fit`
    None where it was not given.
    """
    with store.reading() as session:
        study = store.study_row(session, study_id)
        result = session.execute(
            select(
                ReplyItem.external_id.label("id"),
                ReplyItem.system,
                ReplyItem.persona,
                ReplyItem.persona_role,
                ReplyItem.context,
                ReplyItem.reply,
                ReplyItem.meta,
                ReplyLabel.annotator,
                ReplyLabel.acceptability,
                ReplyLabel.persona_fit,
                ReplyLabel.faults,
                ReplyLabel.comment,
                ReplyLabel.created_at,
            )
            .join(ReplyItem, ReplyItem.id == ReplyLabel.item_id)
            .where(ReplyLabel.study_id == study.id)
            .order_by(ReplyLabel.id)
        )
        frame = pd.DataFrame(result.all(), columns=list(LABEL_ROW_COLUMNS))
    frame["context"] = [json.loads(c) for c in frame["context"]]
    frame["meta"] = [json.loads(m or "{}") for m in frame["meta"]]
    frame["faults"] = [json.loads(f) for f in frame["faults"]]
    frame["persona_fit"] = frame["persona_fit"].astype(object).where(frame["persona_fit"].notna(), None)
    return frame


def reply_systems(store: StudyStore, study_id: str) -> dict[str, int]:
    """Reply items per system in a study, by system name (systems with no labels yet included)."""
    with store.reading() as session:
        study = store.study_row(session, study_id)
        rows = session.execute(
            select(ReplyItem.system, func.count())
            .where(ReplyItem.study_id == study.id)
            .group_by(ReplyItem.system)
            .order_by(ReplyItem.system)
        ).tuples()
        return {system: int(n) for system, n in rows}
