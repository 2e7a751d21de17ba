"""The output check: persona replies that encourage self-harm or hand over means are replaced before the user
sees them. `judge_reply` decides on one text (precise patterns, then the reply classifier); `ReplyGuard` screens a
streamed reply sentence by sentence, so a failing reply is replaced before its bad part is shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mascot.safety.events import OUTPUT
from mascot.safety.patterns import HARM_WORDS, normalise
from mascot.safety.responses import REPLY_REPLACEMENT
from mascot.safety.text import clip, has_words

if TYPE_CHECKING:
    from mascot.safety.classifier import Classifier
    from mascot.safety.detector import CrisisDetector

# Persona replies that encourage self-harm or hand over means; precise phrasings only, the reply
# classifier covers the rest.
REPLY_PATTERNS: dict[str, str] = {
    "encourage": r"\b(?:you should|go ahead and|just|why not) (?:kill|hurt|cut|end|off) (?:yourself|your life|it all)\b"
                 r"|\b(?:do it|end it)[,.!]? (?:nobody|no one) (?:will|would|is going to) (?:stop|miss) you\b"
                 r"|\b(?:they|everyone|the world) (?:would|will) be better off without you\b",
    "dose": r"\b(?:lethal|fatal|deadly) (?:dose|amount)\b[^.]{0,40}\b(?:is|would be|of)\b[^.]{0,30}\d"
            r"|\b\d+\s*(?:mg|g|grams|milligrams|tablets|pills|of (?:those|these|your))\b[^.]{0,40}\b(?:would|will|is|are) "
            r"(?:be )?(?:enough|fatal|lethal|kill)\b",
    "method": r"\b(?:the (?:most painless|quickest|fastest|easiest|surest) (?:way|method) (?:to die|is)|how to tie (?:a|the) noose)\b",
}
_REPLY_COMPILED = [(k, re.compile(v, re.I)) for k, v in REPLY_PATTERNS.items()]
_SENTENCE_END = re.compile(r"[.!?\n][\"')\]]*(?=\s)")
_WORD_END = re.compile(r"\S\s")


@dataclass(frozen=True)
class ReplyVerdict:
    """One decision on a persona reply: `blocked` replies are replaced before the user sees them."""

    blocked: bool
    score: float = 0.0
    layer: str = ""


def judge_reply(text: str, classifier: Callable[[], Classifier] | None, risky: bool = True) -> ReplyVerdict:
    """The output check's decision on `text`: the reply patterns, then (when `classifier` gives the reply
    classifier; None runs the patterns only) its score against its threshold.

    In a conversation the input check found ordinary (`risky=False`), the classifier may only replace text that
    uses a word of self-harm, death or means (`HARM_WORDS`): on its own it replaced 4 of 48 ordinary persona
    replies ("The cat is out of the game.", 0.98; benchmarks/reply_false_positives.py). Once the user's message
    is *concern* or *crisis*, or outside the chat (the labelled evaluation), every classifier verdict counts."""
    clean = clip(text)
    if not has_words(clean):
        return ReplyVerdict(False, 0.0, "empty")
    norm = normalise(clean)
    for name, rx in _REPLY_COMPILED:
        if rx.search(norm):
            return ReplyVerdict(True, 1.0, f"pattern:{name}")
    if classifier is None:
        return ReplyVerdict(False, 0.0, "pattern")
    if not risky and not HARM_WORDS.search(norm):
        return ReplyVerdict(False, 0.0, "ordinary")
    model = classifier()
    score = float(model.score([clean])[0])
    return ReplyVerdict(score >= float(model.meta["thresholds"]["crisis"]), round(score, 4), "classifier")


def first_words_end(text: str, words: int = 4) -> int:
    """Where the text's first `words` complete words end (after the space that follows them), or 0 when
    fewer have arrived: the opening a reply may show before its first sentence is complete."""
    ends = [m.end() for m in _WORD_END.finditer(text)]
    return ends[words - 1] if len(ends) >= words else 0


class ReplyGuard:
    """Screens a streamed reply sentence by sentence: only checked sentences are passed on, and a
    reply that fails is replaced (`replaced` becomes True) before its bad part is shown. Decisions go to the
    detector's event log, if it has one."""

    def __init__(self, detector: CrisisDetector, session_id: str = "", risky: bool = True) -> None:
        self.detector = detector
        self.session_id = session_id
        self.risky = risky
        self.replaced = False
        self.verdict: ReplyVerdict | None = None

    def _fails(self, piece: str, classifier: bool = True) -> bool:
        verdict = self.detector.check_reply(piece, self.session_id, record=False, classifier=classifier, risky=self.risky)
        if verdict.blocked:
            self.verdict = verdict
        return verdict.blocked

    def stream(self, partials: Iterable[str]) -> Iterator[str]:
        """Yield safe prefixes of the growing reply, then the full reply (or the replacement).

        The reply's first four words ("That sounds really hard ") may go out before their sentence ends, once
        the patterns pass them (the classifier, trained on whole replies, misreads four-word openings: it
        flagged "The idea is that when" at 0.99), so the user sees the persona start sooner. That sentence
        is checked again, whole and by every layer, when it ends, and a failing one replaces the reply
        before its bad words are shown."""
        checked = sentence = 0  # shown up to `checked`; the sentence being shown starts at `sentence`
        text = ""
        for text in partials:
            ends = [m.end() for m in _SENTENCE_END.finditer(text)]
            upto = ends[-1] if ends else (first_words_end(text) if not checked else 0)
            if upto > checked:
                if self._fails(text[sentence:upto], classifier=bool(ends)):
                    yield from self._replace()
                    return
                checked = upto
                sentence = upto if ends else sentence
                yield text[:checked]
        final = self.detector.check_reply(text, self.session_id, risky=self.risky)
        if final.blocked or (text[checked:].strip() and self._fails(text[sentence:])):
            self.verdict = self.verdict or final
            yield from self._replace()
            return
        self.verdict = final
        yield text

    def _replace(self) -> Iterator[str]:
        self.replaced = True
        if self.verdict is not None:
            self.detector.record(OUTPUT, "replaced", self.verdict.score, self.verdict.layer, self.session_id)
        yield REPLY_REPLACEMENT
