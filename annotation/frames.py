"""Judgments of a study as one pandas DataFrame with system names resolved (for stats and exports).

One SQL query; 100,000 judgments load in well under a second. Columns: judgment_id, item_id,
annotator, system_a, system_b, choice (a|b|tie|both_bad), winner, loser (system names or None),
left_system, the six `<criterion>_a/_b` ratings, comment, seconds, too_fast, attention_passed,
is_attention, leak_terms, source, created_at; plus context, dialogue_a, dialogue_b with `with_text`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Select, case, select
from sqlalchemy.orm import aliased

from annotation.models import CHOICES, CRITERIA, Annotator, Item, Judgment, System
from annotation.store import StudyStore

RATING_COLUMNS: tuple[str, ...] = tuple(f"{c}_{s}" for c in CRITERIA for s in "ab")


def load_judgments(
    store: StudyStore, *, study_id: str, with_text: bool = False, for_stats: bool = False
) -> pd.DataFrame:
    """All judgments of `study_id`, oldest first, one row each (see module docstring for columns).

    `for_stats` returns only what statistics read, with system and annotator names as pandas
    categoricals built from integer ids (no comment, leak_terms, source, created_at, no texts):
    that keeps `stats` on 100,000 judgments well under two seconds.
    """
    if for_stats:
        return _stats_frame(store, study_id)
    sys_a, sys_b = aliased(System), aliased(System)
    left = case(
        (Judgment.left_system_id == Item.system_a_id, "a"),
        (Judgment.left_system_id == Item.system_b_id, "b"),
        else_=None,
    )
    columns = [
        Judgment.id.label("judgment_id"),
        Item.external_id.label("item_id"),
        Annotator.external_id.label("annotator"),
        sys_a.name.label("system_a"),
        sys_b.name.label("system_b"),
        Judgment.choice,
        left.label("left_side"),
        *[getattr(Judgment, c) for c in RATING_COLUMNS],
        Judgment.seconds,
        Judgment.too_fast,
        Judgment.attention_passed,
        Item.is_attention,
        Judgment.comment,
        Item.leak_terms,
        Judgment.source,
        Judgment.created_at,
    ]
    if with_text:
        columns += [Item.context, Item.dialogue_a, Item.dialogue_b, Item.meta]
    stmt = (
        select(*columns)
        .join(Item, Item.id == Judgment.item_id)
        .join(Annotator, Annotator.id == Judgment.annotator_id)
        .join(sys_a, sys_a.id == Item.system_a_id)
        .join(sys_b, sys_b.id == Item.system_b_id)
        .where(Judgment.study_id == study_id)
        .order_by(Judgment.id)
    )
    with store.reading() as session:
        store.study_row(session, study_id)  # clear error for an unknown study
        frame = _raw_frame(session.connection(), stmt)
    frame["created_at"] = pd.to_datetime(frame["created_at"])
    return add_outcomes(_convert(frame))


def _stats_frame(store: StudyStore, study_id: str) -> pd.DataFrame:
    """Integer ids from SQL, turned into categoricals of names (fast to fetch, group and compare)."""
    stmt = (
        select(
            Judgment.id.label("judgment_id"),
            Judgment.item_id,
            Judgment.annotator_id.label("annotator"),
            Item.system_a_id.label("system_a"),
            Item.system_b_id.label("system_b"),
            Judgment.choice,
            Judgment.left_system_id.label("left_id"),
            *[getattr(Judgment, c) for c in RATING_COLUMNS],
            Judgment.seconds,
            Judgment.too_fast,
            Judgment.attention_passed,
            Item.is_attention,
        )
        .join(Item, Item.id == Judgment.item_id)
        .where(Judgment.study_id == study_id)
        .order_by(Judgment.id)
    )
    with store.reading() as session:
        store.study_row(session, study_id)
        frame = _raw_frame(session.connection(), stmt)
        systems = dict(
            session.execute(select(System.id, System.name).where(System.study_id == study_id)).all()
        )
        people = dict(
            session.execute(
                select(Annotator.id, Annotator.external_id).where(Annotator.study_id == study_id)
            ).all()
        )
    left_id = pd.to_numeric(frame.pop("left_id"))
    frame["left_side"] = np.where(
        left_id.eq(frame["system_a"]), "a", np.where(left_id.eq(frame["system_b"]), "b", None)
    )
    names = sorted(systems.values())
    dtype = pd.CategoricalDtype(names)
    for col in ("system_a", "system_b"):
        frame[col] = frame[col].map(systems).astype(dtype)
    frame["annotator"] = frame["annotator"].map(people).astype(pd.CategoricalDtype(sorted(people.values())))
    frame["item_id"] = frame["item_id"].astype("int64")
    frame["choice"] = frame["choice"].astype(pd.CategoricalDtype(list(CHOICES)))
    return add_outcomes(_convert(frame))


def _convert(frame: pd.DataFrame) -> pd.DataFrame:
    """Raw driver values -> pandas types, vectorized (SQLite hands back 0/1 flags and NULLs)."""
    frame["judgment_id"] = frame["judgment_id"].astype("int64")
    frame["seconds"] = pd.to_numeric(frame["seconds"]).astype("float64")
    passed = frame["attention_passed"].map({1: True, 0: False})  # True/False hash as 1/0: mapped too
    frame["attention_passed"] = passed.astype(object).where(passed.notna(), None)
    return frame


def _raw_frame(conn: Connection, stmt: Select[Any]) -> pd.DataFrame:
    """Run `stmt` through the driver without SQLAlchemy's per-value type processing.

    Row-by-row type conversion costs more than a second on 100,000 judgments; the columns are
    converted in bulk by pandas instead. Works with any driver (positional or named parameters).
    """
    compiled = stmt.compile(dialect=conn.dialect)
    params = compiled.construct_params()
    args: Any = tuple(params[k] for k in compiled.positiontup or ()) if compiled.positional else params
    result = conn.exec_driver_sql(str(compiled), args)
    names = list(result.keys())
    rows = result.cursor.fetchall()  # plain driver tuples: no per-row Row objects
    result.close()
    columns = list(zip(*rows)) if rows else [()] * len(names)
    return pd.DataFrame({name: pd.Series(col, dtype=object) for name, col in zip(names, columns)})


def add_outcomes(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `winner`, `loser` and `left_system` (system names, missing for ties) from choice and sides.

    Works on plain string columns and on the categoricals of `for_stats` frames alike.
    """
    frame = frame.copy()
    is_a, is_b = frame["choice"].eq("a"), frame["choice"].eq("b")
    frame["winner"] = frame["system_a"].where(is_a, frame["system_b"].where(is_b))
    frame["loser"] = frame["system_b"].where(is_a, frame["system_a"].where(is_b))
    left = frame["left_side"] if "left_side" in frame else pd.Series(None, index=frame.index, dtype=object)
    frame["left_system"] = frame["system_a"].where(left.eq("a"), frame["system_b"].where(left.eq("b")))
    for col in RATING_COLUMNS:
        if col in frame:
            frame[col] = frame[col].astype("Int64")  # keep 1-5 integers (NaN would make them floats)
    for col in ("too_fast", "is_attention"):
        if col in frame:
            frame[col] = frame[col].astype(bool)
    return frame
