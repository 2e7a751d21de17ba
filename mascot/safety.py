"""Crisis check that runs before the director: messages expressing intent of self-harm or suicide
get one fixed, caring reply with crisis-line information instead of the group's replies.

The check is a transparent pattern list (direct and indirect phrasing) with negation handling,
tuned to prefer false positives over misses; every hit is logged.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger("mascot.safety")

CRISIS_SPEAKER = "Safety"

CRISIS_REPLY = (
    "I'm really sorry you're feeling this way, and I'm glad you told us. What you're describing sounds "
    "serious, and you deserve support from a real person right now. We're an AI group and can't keep you "
    "safe in a crisis.\n\n"
    "- If you are in immediate danger, call your local emergency number (911 in the US, 112 in the EU, 999 in the UK).\n"
    "- US: call or text **988** (Suicide & Crisis Lifeline), or text HOME to 741741.\n"
    "- UK & Ireland: call Samaritans on **116 123** (free, 24/7).\n"
    "- Elsewhere: find a free, confidential helpline at **findahelpline.com**.\n\n"
    "If you can, reach out to someone you trust and let them know how you're feeling. You don't have to go "
    "through this alone."
)

_SELF = r"(?:myself|my self|my own life|my life)"
# Direct and indirect expressions of suicidal intent or self-harm by the speaker.
_PATTERNS = [
    rf"\b(?:kill(?:ing)?|hurt(?:ing)?|harm(?:ing)?|cut(?:ting)?|hang(?:ing)?|drown(?:ing)?|poison(?:ing)?|shoot(?:ing)?|starv(?:e|ing))\s+{_SELF}\b",
    rf"\b(?:end|take|ending|taking)\s+{_SELF}\b",
    r"\bsuicid(?:e|al)\b",
    r"\bend (?:it|it all|everything)\b",
    r"\b(?:want|wanna|going|plan(?:ning)?|ready|thinking about|think about)\s+(?:to\s+)?(?:die|be dead)\b",
    r"\bwish (?:i|I) (?:was|were) dead\b",
    r"\bwish (?:i|I) (?:could )?(?:never wake up|wouldn't wake up|didn't exist|was never born|had never been born)\b",
    r"\b(?:don't|do not|dont) want to (?:be alive|live|exist|be here anymore|wake up)\b",
    r"\bno (?:reason|point) (?:to|in) (?:live|living|go(?:ing)? on)\b",
    r"\b(?:can't|cannot|cant) (?:go on|do this anymore|keep living)\b",
    r"\b(?:better off|be better) (?:without me|if i (?:was|were)n't here|dead)\b",
    r"\bnot (?:be|being) here (?:anymore|much longer|tomorrow)\b",
    r"\b(?:won't|will not|wont) be (?:here|around|alive) (?:tomorrow|much longer|anymore|for long)\b",
    r"\b(?:go to sleep|fall asleep) and (?:never|not) wake up\b",
    r"\b(?:overdose|self[- ]harm|slit my wrists?|jump off (?:a|the) (?:bridge|building|roof))\b",
    r"\bgoodbye (?:forever|cruel world)\b",
    r"\bwrote (?:a|my) (?:suicide|goodbye) (?:note|letter)\b",
]
# Figurative uses that are not crisis language.
_FIGURATIVE = [
    r"\b(?:killing|kill) (?:me|it)\b(?! ?self)",
    r"\bdied laughing\b",
    r"\bdying to\b",
    r"\bto die for\b",
    r"\bend it with (?:him|her|them)\b",
    r"\bend (?:it|things) (?:with|between)\b",
    r"\bsuicide squad\b",
]
# Negations that cancel a hit when they directly govern it ("I would never kill myself").
_NEGATION = re.compile(
    r"\b(?:never|not|n't|no longer|don't|do not|wouldn't|would not|won't|am not|i'm not|im not)\b[^.!?\n]{0,25}$",
    re.I,
)
_ABOUT_OTHERS = re.compile(r"\b(?:he|she|they|my (?:friend|brother|sister|mom|dad|mother|father|son|daughter|partner))\b[^.!?\n]{0,30}$", re.I)


@dataclass(frozen=True)
class CrisisResult:
    """Outcome of the check; `matched` is the phrase that triggered it."""

    is_crisis: bool
    matched: str = ""


def check_crisis(text: str) -> CrisisResult:
    """Return whether `text` expresses the writer's own intent of suicide or self-harm."""
    lowered = text.lower().replace("’", "'")
    cleaned = lowered
    for pat in _FIGURATIVE:
        cleaned = re.sub(pat, " ", cleaned)
    for pat in _PATTERNS:
        for m in re.finditer(pat, cleaned, flags=re.I):
            before = cleaned[max(0, m.start() - 40) : m.start()]
            sentence_before = re.split(r"[.!?\n]", before)[-1]
            phrase = m.group(0)
            if _NEGATION.search(sentence_before) and not re.search(r"\b(?:don't|do not|dont)\b", phrase):
                # "I'm not suicidal", "I would never hurt myself"; but keep "I don't want to live"
                if not re.search(r"\b(?:anymore|any more)\b", cleaned[m.end() : m.end() + 20]):
                    continue
            if _ABOUT_OTHERS.search(sentence_before) and "myself" not in phrase and "my " not in phrase:
                continue
            return CrisisResult(True, phrase)
    return CrisisResult(False)


def log_crisis(session_id: str, result: CrisisResult) -> None:
    """Record a crisis event (never the message text) for review."""
    log.warning("crisis check triggered in session %s (pattern: %r)", session_id, result.matched)
