"""The single-reply label vocabulary (acceptability, persona fit, faults) and the check of one label.

A reply label judges one reply of a persona on its own (no A/B pair): is it acceptable, does it fit
the persona, and which faults does it show. Values are matched leniently ("Not acceptable",
"not-acceptable" and "not_acceptable" are the same) and stored in their canonical form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from annotation.errors import InvalidInput

# Is the reply usable as it stands? (stored on every label)
ACCEPTABILITY: tuple[str, ...] = ("acceptable", "borderline", "not_acceptable")
# Does it sound like the persona it is attributed to? (optional)
PERSONA_FIT: tuple[str, ...] = ("fits", "partly", "off")
# What is wrong with it (any number, none for a clean reply).
FAULTS: tuple[str, ...] = (
    "third_person",  # calls the person it answers "the user" (or "the person") instead of "you"
    "own_life",  # makes the conversation about the persona's own life
    "wrong_tone",
    "narration",  # stage directions or story-telling instead of speech
    "meta_talk",  # talks about being a model, a prompt, a role
    "unfinished",
    "off_topic",
    "incoherent",
    "wrong_situation",  # ignores or contradicts the situation in the context
    "copy",  # repeats an earlier reply of the round
)
LABEL_SOURCES: tuple[str, ...] = ("app", "import")
MAX_LABEL_COMMENT_CHARS = 5_000


def canonical(value: object) -> str:
    """The form a label value is compared in: trimmed, case-folded, spaces and dashes as underscores."""
    text = value.strip() if isinstance(value, str) else ""
    return "_".join(text.casefold().replace("-", " ").split())


def _one_of(value: object, allowed: tuple[str, ...], field: str) -> str:
    key = canonical(value)
    if key not in allowed:
        raise InvalidInput(f"{field} {value!r} is not a valid value; use one of {list(allowed)}")
    return key


def split_faults(value: object) -> list[object]:
    """Faults as given: a list, a ';'-separated string (CSV cells), or nothing."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part for part in value.split(";") if part.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise InvalidInput(f"faults must be a list of strings (or ';'-separated text), not {type(value).__name__}")


@dataclass(frozen=True)
class ReplyLabelValues:
    """One checked label: canonical acceptability, persona fit (or None), faults in vocabulary order."""

    acceptability: str
    persona_fit: str | None = None
    faults: tuple[str, ...] = ()
    comment: str = ""


def check_label(
    acceptability: object,
    persona_fit: object = None,
    faults: Iterable[object] | str | None = (),
    comment: object = "",
) -> ReplyLabelValues:
    """Validate one label; raises InvalidInput naming the field and its valid values."""
    accept = _one_of(acceptability, ACCEPTABILITY, "acceptability")
    fit = None
    if persona_fit is not None and canonical(persona_fit):
        fit = _one_of(persona_fit, PERSONA_FIT, "persona_fit")
    raw = faults if faults is None or isinstance(faults, (str, list, tuple)) else list(faults)
    given = {_one_of(f, FAULTS, "fault") for f in split_faults(raw)}
    text = "" if comment is None else comment
    if not isinstance(text, str) or len(text) > MAX_LABEL_COMMENT_CHARS or "\x00" in text:
        raise InvalidInput(
            f"comment must be text of at most {MAX_LABEL_COMMENT_CHARS:,} characters without NUL characters"
        )
    return ReplyLabelValues(accept, fit, tuple(f for f in FAULTS if f in given), text.strip())
