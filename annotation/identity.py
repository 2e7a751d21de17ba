"""Who an annotator is: one normal form for ids typed or passed in a link, the key that binds an id to one
browser, and the study link key that admits new ids.

An annotator id is Unicode NFKC-normalised and trimmed (`clean_annotator`); that form is stored and exported as
first seen. Two ids are the same annotator when their casefolded forms agree (`annotator_key`), so `ALICE`,
`alice` and the full-width `ａｌｉｃｅ` are one person: a participant who retypes an id, or whose keyboard or phone
changes its case or width, must not become a second annotator. (Recruiting sites issue ids that never differ by
case alone: Prolific's are lower-case hex, MTurk's upper-case.)
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from urllib.parse import urlencode

from annotation.errors import AnnotatorInUse, InvalidInput, LinkKeyInvalid
from annotation.models import Annotator, Study

MAX_ANNOTATOR_CHARS = 200
ANNOTATOR_IN_USE_MESSAGE = (
    "This annotator ID is already in use in another browser, so this browser may not answer under it. "
    "Continue in the browser where you started. If you cannot (a new device, or cleared browser data), ask the "
    "study owner to release your ID, then reload this page."
)
LINK_KEY_MESSAGE = (
    "This study link is not complete: a new annotator ID needs the full link the study owner shared (it ends "
    "with key=...). Open that link again, or ask the study owner."
)


def clean_annotator(annotator: object) -> str:
    """`annotator` as stored: NFKC-normalised and trimmed; raises InvalidInput with what to type instead."""
    value = unicodedata.normalize("NFKC", annotator).strip() if isinstance(annotator, str) else ""
    if not value or len(value) > MAX_ANNOTATOR_CHARS or any(unicodedata.category(ch)[0] == "C" for ch in value):
        shown = repr(value[:40]) + ("…" if len(value) > 40 else "")
        raise InvalidInput(
            f"Invalid annotator id {shown}: give 1-{MAX_ANNOTATOR_CHARS} printable characters, e.g. your "
            "Prolific ID (the ?annotator=... part of the study link)."
        )
    return value


def annotator_key(annotator: object) -> str:
    """The identity of an annotator id: its clean form casefolded (and normalised again, as casefolding can
    produce characters NFKC would change)."""
    return unicodedata.normalize("NFKC", clean_annotator(annotator).casefold())


def _key_hash(session_key: str) -> str:
    return hashlib.sha256(session_key.encode()).hexdigest()


def check_session_key(person: Annotator, session_key: str | None) -> None:
    """Bind an unbound annotator to `session_key`; refuse a different key (another browser)."""
    if session_key is None:
        return
    if person.session_key is None:
        person.session_key = _key_hash(session_key)
    elif not hmac.compare_digest(person.session_key, _key_hash(session_key)):
        raise AnnotatorInUse(ANNOTATOR_IN_USE_MESSAGE)


def check_link_key(study: Study, person: Annotator | None, link_key: str | None) -> None:
    """Admit a new (or released) id only with the study's link key; an id bound to this browser resumes without.

    `link_key=None` is a trusted caller (the CLI, the Python API); the annotator page always passes a string."""
    if link_key is None or (person is not None and person.session_key is not None):
        return  # a bound id: its own browser resumes, another one is told the id is in use (check_session_key)
    if not (isinstance(link_key, str) and hmac.compare_digest(link_key.encode(), study.link_key.encode())):
        raise LinkKeyInvalid(LINK_KEY_MESSAGE)


def study_link(base: str, study_id: str, link_key: str, annotator: str = "ANNOTATOR_ID") -> str:
    """The link to share with a study's annotators (`base` like http://HOST:7860/annotate/): the study, its link
    key and the annotator's id, or a recruiting site's placeholder such as `{{%PROLIFIC_PID%}}` (kept as is)."""
    return f"{base}?{urlencode({'study': study_id, 'key': link_key})}&annotator={annotator}"
