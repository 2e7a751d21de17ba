"""Quality checks: system names leaking into dialogue text, too-fast votes, attention checks, and the
per-annotator and position-bias summaries computed from judgments.

A dialogue that names its system ("As MASCOT, I ...") breaks blinding, so such items are flagged
at import and the names are masked before any text is sent to an annotator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import pandas as pd
from scipy.stats import binomtest

MASK = "[system]"
# Names shorter than this are too likely to be ordinary words ("A", "v2") to search for.
MIN_NAME_CHARS = 3


def _name_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """One case-insensitive regex matching any name as a whole word; '-', '_' and spaces interchange."""
    return _compiled(tuple(sorted({n.strip() for n in names}, key=lambda n: (-len(n), n))))


@lru_cache(maxsize=256)
def _compiled(names: tuple[str, ...]) -> re.Pattern[str] | None:
    """Compile (and cache: it runs on every task shown) the pattern for a sorted tuple of names."""
    parts = []
    for name in names:
        if len(name) < MIN_NAME_CHARS:
            continue
        tokens = [re.escape(t) for t in re.split(r"[\s_-]+", name) if t]
        if tokens:
            parts.append(r"[\s_-]*".join(tokens))
    if not parts:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)", re.IGNORECASE)


def find_system_mentions(texts: Iterable[str], names: Iterable[str]) -> list[str]:
    """Return the system names (as given) that occur in any of `texts`, sorted.

    >>> find_system_mentions(["I am mascot, your helper"], ["MASCOT", "Few-Shot CoT"])
    ['MASCOT']
    """
    names = [n for n in names if len(n.strip()) >= MIN_NAME_CHARS]
    joined = "\n".join(texts)
    found = []
    for name in names:
        pattern = _name_pattern([name])
        if pattern is not None and pattern.search(joined):
            found.append(name)
    return sorted(set(found))


def mask_system_names(text: str, names: Iterable[str]) -> str:
    """Replace every mention of a system name in `text` with `[system]`.

    >>> mask_system_names("Few shot CoT says hi", ["Few-Shot CoT"])
    '[system] says hi'
    """
    pattern = _name_pattern(names)
    return text if pattern is None else pattern.sub(MASK, text)


# A vote recorded this soon after its task was served came from a script, not a reader: flagged as
# too fast in every study, whatever its own minimum (the server measures the time).
API_SPEED_SECONDS = 1.0


def is_too_fast(seconds: float | None, min_seconds: float) -> bool:
    """True when a vote took less than the study's minimum time (reading two dialogues takes time)."""
    return seconds is not None and min_seconds > 0 and seconds < min_seconds


def attention_passed(choice: str, expected: str | None) -> bool | None:
    """Whether an attention-check vote matches the known answer; None for ordinary items."""
    return None if expected is None else choice == expected


def position_bias(frame: pd.DataFrame) -> dict[str, Any]:
    """Share of decisive votes for the left response; a sign test against 0.5 (blind-order check)."""
    known = frame[frame.left_system.notna() & frame.winner.notna()]
    left = int((known.winner == known.left_system).sum())
    n = len(known)
    return {
        "n": n,
        "left_share": left / n if n else math.nan,
        "p_value": float(binomtest(left, n, 0.5).pvalue) if n else math.nan,
    }


def annotator_quality(frame: pd.DataFrame) -> pd.DataFrame:
    """Per annotator: judgments, attention checks passed/failed, too-fast votes, median seconds."""
    g = frame.groupby("annotator", observed=True)
    return pd.DataFrame(
        {
            "judgments": g.size(),
            "attention_checks": g["attention_passed"].apply(lambda s: int(s.notna().sum())),
            "attention_failed": g["attention_passed"].apply(lambda s: int((s == False).sum())),  # noqa: E712
            "too_fast": g["too_fast"].sum().astype(int),
            "median_seconds": g["seconds"].median(),
        }
    ).reset_index()
