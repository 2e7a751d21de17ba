"""Does the user's message report distress, and does a reply celebrate it anyway (a mood mismatch)?

Why: the trained Anchor answered "I feel out of my depth" with "How exciting!" and a loss with "How
wonderful news is that!". The judge's first check read distress from a word list ("died", "lonely", ...),
which finds 15 of the 78 negative-labelled openings the project bundles (recall 0.19) and fires on 12 of
the 70 positive ones (`benchmarks/mood_signal.py`), so it hardly ever reached the training signal. The
reading now comes first from the scenario's emotion label, which every Empathetic-Dialogues-format and
ESConv opening carries:

- `emotion`: the label's valence (`valence_of`) is negative; a positive label settles it the other way
  (celebrating good news is right);
- `words`: only when there is no label, or a neutral one (surprised, nostalgic, ...): the latest user
  message contains a distress word (`DISTRESS_CUES`).

A reply *celebrates* when it uses a phrase of `CELEBRATION` ("how wonderful", "congratulations", ...).
Tried and not used: reading distress from sentence embeddings (similarity to short distress lines against
good-news lines) measured recall 0.36 at a false-positive rate of 0.11 on the same openings: the encoder
groups messages by topic more than by mood.
"""

from __future__ import annotations

import re

from mascot.data.scenario import valence_of
from mascot.group.dialogue import Dialogue
from mascot.judges.lexicon import CELEBRATION, DISTRESS_CUES, words

_CELEBRATE = re.compile("|".join(CELEBRATION), re.I)


def celebrates(text: str) -> bool:
    """A phrase of celebration ("how wonderful", "congratulations", "so happy for you", ...)."""
    return bool(_CELEBRATE.search(text or ""))


def has_distress_words(text: str) -> bool:
    """The text holds a word of `DISTRESS_CUES` ("died", "lonely", "failed", ...)."""
    return any(w in DISTRESS_CUES for w in words(text or ""))


def distress_reading(dialogue: Dialogue) -> str:
    """Why the user's side reads as distress: 'emotion' (a negative label), 'words', or '' (it does not)."""
    valence = valence_of(dialogue.emotion or "")
    if valence == "negative":
        return "emotion"
    if valence == "positive":
        return ""
    user = dialogue.last_user_text() or dialogue.situation
    return "words" if has_distress_words(user) else ""


def mood_mismatch(dialogue: Dialogue, reply: str) -> bool:
    """The reply celebrates although the user reported distress."""
    return celebrates(reply) and bool(distress_reading(dialogue))
