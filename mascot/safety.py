"""Crisis safety for the companion group: a layered, measured detector on user messages, a graded
response, and an output check on persona replies. Figures and method: docs/safety.md.

Detector layers (`CrisisDetector.check`):
1. patterns (`mascot.safety_patterns`): a small high-precision list, English and 19 other languages; a hit
   is a crisis;
2. the semantic classifier (`mascot.safety_model`): the bundled MiniLM encoder fine-tuned on the
   shipped labelled messages, with two thresholds chosen by cross-validation (crisis, concern); it reads
   English, so on a message that does not (`mascot.safety_language`) it can give *concern* at most;
3. context: the last three user turns are also scored together: "I have a plan" after "I can't go
   on" is a crisis, after "I failed my driving test" it is not; a harmless turn right after a
   crisis turn is still *concern*;
4. optionally an LLM judge (`LLMGrayZoneJudge`, off by default) that may upgrade a gray-zone
   *concern* to *crisis* when an `openai`/`vllm` backend is configured.

Tiers: *crisis* (the fixed reply with crisis lines replaces the group), *concern* (the group answers,
but Anchor opens by asking about safety and where to get help), *none*. Any internal error returns
*concern*. Every decision is logged with tier, score and layer, never the text (`mascot.safety_log`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mascot.dialogue import Directive
from mascot.safety_log import INPUT, OUTPUT, SafetyLog, safety_log
from mascot.safety_language import reads_as_english
from mascot.safety_patterns import match_concern, match_pattern, normalise

if TYPE_CHECKING:
    from mascot.backends.base import Backend
    from mascot.personas import Persona
    from mascot.safety_model import Classifier

log = logging.getLogger("mascot.safety")

CRISIS, CONCERN, NONE = "crisis", "concern", "none"
CRISIS_SPEAKER = "Safety"
CONTEXT_TURNS = 3
MAX_CHECK_CHARS = 2000  # longer messages are checked on their first and last 1000 characters

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
HELP_NOTE = (
    "Are you safe right now? If you're having thoughts of hurting yourself, you can talk to someone any time: "
    "call or text 988 (US), call Samaritans on 116 123 (UK & Ireland), or find a free line at findahelpline.com."
)
CONCERN_ACTION = ("Gently and directly ask whether they are safe and whether they are thinking of hurting themselves, "
                  "and mention that a crisis line (988 in the US, 116 123 in the UK) is there for them")
CONCERN_TONE = "warm, calm and direct"
CONCERN_PERSONA = "Anchor"
REPLY_REPLACEMENT = (
    "I'm not going to say that. What you're going through matters, and I want you to be safe. If you're thinking "
    "about hurting yourself, please reach out now: call or text 988 (US), call Samaritans on 116 123 (UK & Ireland), "
    "or find a free line at findahelpline.com."
)
_HELPLINE = re.compile(r"\b988\b|116 ?123|findahelpline", re.I)
_SENTENCE_END = re.compile(r"[.!?\n][\"')\]]*(?=\s)")

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

# A short message with no word of self-harm, death or means, decided alone (no suspicious earlier turn), needs a
# classifier score of SHORT_CONCERN for *concern*: the concern threshold (0.0033) sits where short everyday lines
# land ("hello there" 0.006, "tell me more" 0.22, "I don't know" 0.004: 4 of 30 everyday chat lines were
# *concern*). Checked against both held-out sets before shipping: no crisis line there falls under the rule.
# Such a message decided alone is also never more than *concern* from the classifier: the crisis reply replaces
# the group's answer, and the round-3 encoder gave odd short lines crisis scores ("I have a plan to pass next
# time." 0.74); patterns and the context still make short lines a crisis ("i want to kms", "I have a plan." after
# "I can't go on"), and Anchor still asks about safety.
SHORT_WORDS, SHORT_CONCERN = 5, 0.3

# A plan, a time, means at hand or a farewell. Alone such a line is often harmless ("I have a plan for the
# weekend"); right after a turn that already read as ideation (*concern* or above) it is a crisis. Decided alone,
# a line that matches it but uses no word of harm is at most *concern* (the round-3 encoder read "I have a plan to
# pass next time." as a crisis, 0.74): Anchor asks about safety instead of the group being replaced.
ESCALATION = re.compile(
    r"\b(?:i(?:'ve| have) (?:got )?a plan|i(?:'ve| have) decided|i know (?:how|when|where)|i(?:'m| am) (?:going|gonna) "
    r"(?:to )?do it|(?:it|i)(?:'s| is| will be|'ll be) (?:going to be )?(?:tonight|tomorrow|this (?:week(?:end)?|evening))|"
    r"(?:got|have|bought|ready) (?:the |my |some )?(?:pills|rope|gun|blade|razor)|wrote (?:letters|a letter|goodbye)|"
    r"goodbye (?:note|letter)s?|going there tonight|after every(?:one|body)(?:'s| is) asleep)", re.I)

# Indecision: "should I", "I don't know if/what", "not sure whether". Found in multi-turn chat probes: after a failed
# driving test "I just don't know if I should even try again." scored 0.95, a sick cat's surgery "I don't know what
# the right choice is." 0.81 and "Not sure if I should tell my mom." 0.87, so the crisis reply replaced the group
# (round 4c's indecision training lines cost recall and were not shipped). Decided alone, such a line with no word
# of harm (`HARM_WORDS`) and none of going on living (`DESPAIR_WORDS`: "I don't know if I can keep going" stays a
# crisis) is at most *concern*: Anchor asks about safety and names where to get help instead. Checked before
# shipping against v1, v3, v4, v5, the training pool and the everyday openings: no held-out crisis line falls
# under the rule (tests/test_safety.py::test_indecision_alone_is_at_most_concern).
INDECISION = re.compile(
    r"\b(?:i (?:just |really |honestly )?(?:don'?t|do not) know (?:if|whether|what|which|how)|"
    r"(?:not|never) (?:sure|certain) (?:if|whether|what|which)|i can'?t (?:decide|choose|make up my mind)|"
    r"should i (?:even |just |really )?(?:try|bother|keep|go|do|say|tell|choose|pick|take|stay|leave|quit)|"
    r"torn between|what (?:the right|the best) (?:choice|decision|thing) is)", re.I)
DESPAIR_WORDS = re.compile(
    r"\b(?:keep going|go on|carry on|be here|here anymore|live|living|lives?|alive|exist\w*|make it|hold on|"
    r"survive|wak(?:e|ing) up|point|anymore|disappear\w*|gone|end|ending|over|escape|stop)\b", re.I)

# Words of self-harm, death and means. In a conversation the input check found ordinary (tier *none*), the reply
# classifier may only replace a sentence that uses one of them: on its own it replaced 4 of 48 ordinary persona
# replies ("The cat is out of the game.", 0.98; benchmarks/reply_false_positives.py). Once the user's message is
# *concern* or *crisis*, or outside the chat (the labelled evaluation), every classifier verdict counts.
HARM_WORDS = re.compile(
    r"\b(?:kill\w*|die|dying|dead|death|suicid\w*|unalive|kms|end(?:ing)? (?:it|your life|things|everything)|"
    r"overdos\w*|dose|pills?|tablets?|cut(?:ting)?|blade|razor|knife|bleed\w*|veins?|wrists?|hang\w*|noose|rope|"
    r"jump\w*|bridge|roof|ledge|guns?|firearm|shoot\w*|poison\w*|toxic|lethal|fatal|drown\w*|starv\w*|burn\w*|"
    r"hurt(?:ing)? yourself|harm\w*|self-harm|better off without|give up on life|let go for good|goodbye|"
    r"painless|carbon monoxide|stockpil\w*)\b", re.I)


@dataclass(frozen=True)
class CrisisResult:
    """One decision on a user message: tier, score (0..1), the layer that decided, the pattern name."""

    is_crisis: bool
    matched: str = ""
    tier: str = NONE
    score: float = 0.0
    layer: str = ""

    @property
    def is_concern(self) -> bool:
        return self.tier == CONCERN


@dataclass(frozen=True)
class ReplyVerdict:
    """One decision on a persona reply: `blocked` replies are replaced before the user sees them."""

    blocked: bool
    score: float = 0.0
    layer: str = ""


def _result(tier: str, score: float, layer: str, matched: str = "") -> CrisisResult:
    return CrisisResult(tier == CRISIS, matched, tier, round(float(score), 4), layer)


# `@Name` addresses a persona (the chat's mention syntax); it says nothing about risk, and the round-3 encoder
# scored bare mentions high ("@Beacon any ideas?" 0.84), so mentions are removed before the check.
MENTION = re.compile(r"(?<![\w@])@[A-Za-z][\w-]*[,:]?")


def _clip(text: str) -> str:
    """The text to check: stripped, control characters and @mentions removed, huge inputs cut to both ends."""
    t = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in text)
    t = re.sub(r"[ \t]{2,}", " ", MENTION.sub(" ", t)).strip()
    if len(t) > MAX_CHECK_CHARS:
        t = t[: MAX_CHECK_CHARS // 2] + "\n" + t[-MAX_CHECK_CHARS // 2 :]
    return t


def _has_words(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


class LLMGrayZoneJudge:
    """A short classification prompt that may upgrade a gray-zone *concern* to *crisis*.

    Meant for capable models behind the `openai` or `vllm` backends; `make_gray_zone_judge` returns
    one only when `MASCOT_SAFETY_LLM_JUDGE=1` and such a backend is configured."""

    PROMPT = ("You screen messages sent to an emotional-support chat for suicide and self-harm risk. Read the user's "
              "recent messages and answer with exactly one word: CRISIS if the writer expresses current intent, a plan, "
              "access to means, a farewell, self-harm, or asks for lethal information about themselves; otherwise SAFE.")

    def __init__(self, backend: "Backend") -> None:
        self.backend = backend

    def confirms_crisis(self, turns: Sequence[str]) -> bool:
        from mascot.backends.base import GenerationParams

        user = "\n".join(f"User: {t}" for t in turns)
        messages = [{"role": "system", "content": self.PROMPT}, {"role": "user", "content": user}]
        out = self.backend.generate([messages], GenerationParams(max_new_tokens=4, temperature=0.0))[0].text
        return out.strip().upper().startswith("CRISIS")


def make_gray_zone_judge(backend: "Backend | None") -> LLMGrayZoneJudge | None:
    """The optional LLM judge for `backend`, or None (the default, and always on the embedded model)."""
    enabled = os.environ.get("MASCOT_SAFETY_LLM_JUDGE", "").strip().lower() in ("1", "true", "yes", "on")
    if enabled and backend is not None and backend.kind in ("openai", "vllm"):
        return LLMGrayZoneJudge(backend)
    return None


class CrisisDetector:
    """The layered detector; thresholds come from the classifier's cross-validated metadata."""

    def __init__(self, classifier: "Classifier | None" = None, reply_classifier: "Classifier | None" = None,
                 use_classifier: bool = True, events: SafetyLog | None = None) -> None:
        self._classifier = classifier
        self._reply_classifier = reply_classifier
        self.use_classifier = use_classifier
        self._events = events

    @property
    def events(self) -> SafetyLog:
        return self._events or safety_log()

    @property
    def classifier(self) -> "Classifier":
        if self._classifier is None:
            from mascot.safety_model import load_classifier

            self._classifier = load_classifier("messages")
        return self._classifier

    @property
    def reply_classifier(self) -> "Classifier":
        if self._reply_classifier is None:
            from mascot.safety_model import load_classifier

            self._reply_classifier = load_classifier("replies")
        return self._reply_classifier

    @property
    def thresholds(self) -> tuple[float, float]:
        """(crisis, concern) thresholds on the classifier's probability."""
        t = self.classifier.meta["thresholds"]
        return float(t["crisis"]), float(t["concern"])

    @property
    def context_floor(self) -> float:
        """How suspicious a message must be alone before earlier turns may make it a crisis (or before
        its window with them is scored at all)."""
        t = self.classifier.meta["thresholds"]
        return float(t.get("context", t["concern"]))

    # -- user messages
    def check(self, text: str | None, history: Sequence[str] = (), judge: LLMGrayZoneJudge | None = None,
              session_id: str = "", record: bool = True) -> CrisisResult:
        """Decide the tier of `text` given the earlier user turns `history` (oldest first).

        Never raises: an internal error is logged and returns *concern*."""
        try:
            result = self._check(text, list(history), judge)
        except Exception as exc:  # noqa: BLE001 - fail safe on anything, by design
            log.exception("crisis check failed (%s); failing safe to concern", type(exc).__name__)
            result = _result(CONCERN, 0.0, "error")
        if record:
            self.events.record(INPUT, result.tier, result.score, result.layer, session_id)
            if result.tier != NONE:
                log.warning("crisis check: tier=%s score=%.3f layer=%s session=%s", result.tier, result.score,
                            result.layer, session_id)
        return result

    def _check(self, text: str | None, history: list[str], judge: LLMGrayZoneJudge | None) -> CrisisResult:
        clean = _clip(text or "")
        matched = match_pattern(clean)
        if matched:
            return _result(CRISIS, 1.0, "pattern", matched)
        english = reads_as_english(clean)
        # outside English the classifier cannot read the message: gray-zone words (means, goodbyes) give a concern
        gray = "" if english else match_concern(clean)
        if not self.use_classifier:
            return _result(CONCERN, 0.0, "pattern-concern", gray) if gray else _result(NONE, 0.0, "pattern")
        result = self._classified(clean, history, judge)
        if not english and result.tier == CRISIS and result.layer != "llm":
            # the classifier reads English; outside it, its crisis reading is only a concern (mascot/safety_language.py)
            return _result(CONCERN, result.score, "classifier-language")
        if gray and result.tier == NONE:
            return _result(CONCERN, result.score, "pattern-concern", gray)
        return result

    def _classified(self, clean: str, history: list[str], judge: LLMGrayZoneJudge | None) -> CrisisResult:
        """The classifier and context layers' decision on a message no pattern matched."""
        previous = [_clip(t) for t in history[-(CONTEXT_TURNS - 1) :] if t and _has_words(t)]
        if not _has_words(clean) and not previous:
            return _result(NONE, 0.0, "empty")
        t_crisis, t_concern = self.thresholds
        floor = self.context_floor
        # Each earlier turn alone (cached: each was scored when it was the latest message).
        s_turns = [float(v) for v in self.classifier.score(previous)] if previous else []
        msg = clean if _has_words(clean) else ""
        if not s_turns or max(s_turns) < floor:
            # No earlier turn is even faintly suspicious alone: they can neither raise nor explain away this
            # message, so it is decided alone (one encoder pass instead of a batch of three).
            s_msg = float(self.classifier.score([msg])[0])
            tier = CRISIS if s_msg >= t_crisis else CONCERN if s_msg >= t_concern else NONE
            norm = normalise(clean)
            harmless_words = tier != NONE and not HARM_WORDS.search(norm)
            if harmless_words and len(clean.split()) <= SHORT_WORDS:
                if tier == CRISIS:  # short and harmless-sounding: Anchor asks instead of replacing the group
                    return _result(CONCERN, s_msg, "classifier-short")
                if s_msg < SHORT_CONCERN:
                    return _result(NONE, s_msg, "classifier-short")  # "hello there", "tell me more" (see SHORT_WORDS)
            if harmless_words and tier == CRISIS:  # a plan or a time alone, or "should I ...?" alone: Anchor asks
                if ESCALATION.search(norm):
                    return _result(CONCERN, s_msg, "classifier-plan")  # (see ESCALATION)
                if INDECISION.search(norm) and not DESPAIR_WORDS.search(norm):
                    return _result(CONCERN, s_msg, "classifier-indecision")  # (see INDECISION)
            return _result(tier, s_msg, "classifier")
        window = "\n".join([*previous, clean])
        earlier = "\n".join(_clip(t) for t in history[-CONTEXT_TURNS:] if t and _has_words(t))
        s_msg, s_win, s_prev = (float(v) for v in self.classifier.score([msg, window, earlier]))
        if s_msg >= t_crisis and s_win >= floor:  # the context does not explain it away
            return _result(CRISIS, s_msg, "classifier")
        if max(s_turns) >= t_concern and ESCALATION.search(normalise(clean)):  # ideation, then a plan or means
            return _result(CRISIS, max(s_turns), "context")
        if s_win >= t_crisis and s_msg >= floor:  # read with the earlier turns, this message is a crisis
            return _result(CRISIS, s_win, "context")
        if max(s_msg, s_win) >= t_concern:  # either reading is in the gray zone
            if judge is not None and judge.confirms_crisis([*previous, clean]):
                return _result(CRISIS, max(s_msg, s_win), "llm")
            return _result(CONCERN, max(s_msg, s_win), "classifier" if s_msg >= s_win else "context")
        if s_prev >= t_crisis:
            return _result(CONCERN, s_prev, "context")  # right after a crisis turn, keep asking about safety
        return _result(NONE, max(s_msg, s_win), "classifier")

    # -- persona replies
    def check_reply(self, text: str | None, session_id: str = "", record: bool = True,
                    classifier: bool = True, risky: bool = True) -> ReplyVerdict:
        """Whether a persona reply encourages self-harm or gives means. Never raises: on an internal
        error the reply is blocked (replaced by the safe text). `classifier=False` runs the patterns only
        (for a reply's first few words, which the classifier, trained on whole replies, misreads).
        `risky=False` (the chat, when the user's message was *none*): the classifier may only block text that
        uses a word of self-harm, death or means (`HARM_WORDS`)."""
        try:
            verdict = self._check_reply(text or "", classifier, risky)
        except Exception as exc:  # noqa: BLE001 - fail safe on anything, by design
            log.exception("output check failed (%s); replacing the reply", type(exc).__name__)
            verdict = ReplyVerdict(True, 0.0, "error")
        if record:
            self.events.record(OUTPUT, "replaced" if verdict.blocked else "passed", verdict.score, verdict.layer, session_id)
            if verdict.blocked:
                log.warning("output check replaced a reply: score=%.3f layer=%s session=%s", verdict.score, verdict.layer, session_id)
        return verdict

    def _check_reply(self, text: str, classifier: bool = True, risky: bool = True) -> ReplyVerdict:
        clean = _clip(text)
        if not _has_words(clean):
            return ReplyVerdict(False, 0.0, "empty")
        norm = normalise(clean)
        for name, rx in _REPLY_COMPILED:
            if rx.search(norm):
                return ReplyVerdict(True, 1.0, f"pattern:{name}")
        if not self.use_classifier or not classifier:
            return ReplyVerdict(False, 0.0, "pattern")
        if not risky and not HARM_WORDS.search(norm):
            return ReplyVerdict(False, 0.0, "ordinary")
        score = float(self.reply_classifier.score([clean])[0])
        threshold = float(self.reply_classifier.meta["thresholds"]["crisis"])
        return ReplyVerdict(score >= threshold, round(score, 4), "classifier")

    def guard(self, session_id: str = "", risky: bool = True) -> "ReplyGuard":
        return ReplyGuard(self, session_id, risky)


_WORD_END = re.compile(r"\S\s")


def first_words_end(text: str, words: int = 4) -> int:
    """Where the text's first `words` complete words end (after the space that follows them), or 0 when
    fewer have arrived: the opening a reply may show before its first sentence is complete."""
    ends = [m.end() for m in _WORD_END.finditer(text)]
    return ends[words - 1] if len(ends) >= words else 0


class ReplyGuard:
    """Screens a streamed reply sentence by sentence: only checked sentences are passed on, and a
    reply that fails is replaced (`replaced` becomes True) before its bad part is shown."""

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
            self.detector.events.record(OUTPUT, "replaced", self.verdict.score, self.verdict.layer, self.session_id)
        yield REPLY_REPLACEMENT


_DETECTOR: list[CrisisDetector] = []


def default_detector() -> CrisisDetector:
    """The process-wide detector (its classifiers load once, on first use)."""
    if not _DETECTOR:
        _DETECTOR.append(CrisisDetector())
    return _DETECTOR[0]


def check_crisis(text: str, history: Sequence[str] = (), session_id: str = "") -> CrisisResult:
    """Decide the tier of `text` (given earlier user turns) with the process-wide detector."""
    return default_detector().check(text, history, session_id=session_id)


def concern_directive(roster: "Sequence[Persona]") -> Directive:
    """The forced opening of a *concern* round: Anchor (else the first persona) asks about safety."""
    p = next((p for p in roster if p.name == CONCERN_PERSONA), roster[0])
    return Directive(p.name, CONCERN_ACTION, CONCERN_TONE)


def with_help_note(reply: str) -> str:
    """The concern round's opening reply, with the safety question and helplines if it lacks them."""
    return reply if _HELPLINE.search(reply) else f"{reply.rstrip()}\n\n{HELP_NOTE}".strip()

