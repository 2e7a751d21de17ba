"""Judgments of a study as one pandas DataFrame with system names resolved (for stats and exports).

One SQL query; 100,000 judgments load in well under a second. Columns: judgment_id, item_id,
annotator, system_a, system_b, choice (a|b|tie|both_bad), winner, loser (system names or None),
left_system, the six `<criterion>_a/_b` ratings, comment, seconds, too_fast, attention_passed,
is_attention, leak_terms, source, created_at; plus context, dialogue_a, dialogue_b with `with_text`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import case, select
from sqlalchemy.orm import aliased

from annotation.models import CRITERIA, Annotator, Item, Judgment, System
from annotation.store import StudyStore

RATING_COLUMNS: tuple[str, ...] = tuple(f"{c}_{s}" for c in CRITERIA for s in "ab")


def load_judgments(store: StudyStore, *, study_id: str, with_text: bool = False) -> pd.DataFrame:
    """All judgments of `study_id`, oldest first, one row each (see module docstring for columns)."""
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
        Judgment.comment,
        Judgment.seconds,
        Judgment.too_fast,
        Judgment.attention_passed,
        Item.is_attention,
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
        result = session.execute(stmt)
        frame = pd.DataFrame(result.fetchall(), columns=list(result.keys()))
    return add_outcomes(frame)


def add_outcomes(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `winner`, `loser` and `left_system` name columns derived from choice and sides."""
    frame = frame.copy()
    is_a, is_b = frame["choice"].eq("a"), frame["choice"].eq("b")
    frame["winner"] = np.where(is_a, frame["system_a"], np.where(is_b, frame["system_b"], None))
    frame["loser"] = np.where(is_a, frame["system_b"], np.where(is_b, frame["system_a"], None))
    left = frame["left_side"] if "left_side" in frame else pd.Series(None, index=frame.index)
    frame["left_system"] = np.where(
        left.eq("a"), frame["system_a"], np.where(left.eq("b"), frame["system_b"], None)
    )
    for col in RATING_COLUMNS:
        if col in frame:
            frame[col] = frame[col].astype("Int64")  # keep 1-5 integers (NaN would make them floats)
    for col in ("too_fast", "is_attention"):
        if col in frame:
            frame[col] = frame[col].astype(bool)
    return frame
