"""The crisis detector on user messages: layered, measured, and failing safe. Figures and method: docs/safety.md.

Layers (`CrisisDetector.check`):
1. patterns (`mascot.safety.patterns`): a small high-precision list, English and 19 other languages; a hit
   is a crisis;
2. the semantic classifier (`mascot.safety.classifier`): the bundled MiniLM encoder fine-tuned on the
   shipped labelled messages, with thresholds chosen by cross-validation (crisis, concern, context floor); it
   reads English, so on a message that does not (`mascot.safety.language`) it can give *concern* at most;
3. context: the last three user turns are also scored together: "I have a plan" after "I can't go on" is a
   crisis, after "I failed my driving test" it is not; a harmless turn right after a crisis turn is still
   *concern*;
4. optionally an LLM judge (`mascot.safety.llm_judge`, off by default) that may upgrade a gray-zone *concern*
   to *crisis* on an `openai`/`vllm` backend.

Tiers: *crisis* (the fixed reply replaces the group), *concern* (the group answers, but the pack's concern
opener first asks about safety and where to get help), *none* (`mascot.safety.responses`). Any internal error
returns *concern*. The same object runs the output check on persona replies (`check_reply`, `guard`;
`mascot.safety.guard`).

Every decision goes to the detector's event log (`events`, a `SafetyLog`: tier, score and layer, never the
text); a detector built without one records nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mascot.safety.events import INPUT, OUTPUT, SafetyLog
from mascot.safety.guard import ReplyGuard, ReplyVerdict, judge_reply
from mascot.safety.language import reads_as_english
from mascot.safety.patterns import HARM_WORDS, match_concern, match_pattern, normalise
from mascot.safety.text import clip, has_words

if TYPE_CHECKING:
    from mascot.safety.classifier import Classifier
    from mascot.safety.llm_judge import LLMGrayZoneJudge
    from mascot.safety.multilingual import MultilingualLayer

log = logging.getLogger(__name__)

CRISIS, CONCERN, NONE = "crisis", "concern", "none"
CONTEXT_TURNS = 3

# A short message with no word of self-harm, death or means, decided alone (no suspicious earlier turn), needs a
# classifier score of SHORT_CONCERN for *concern*: the concern threshold (0.0033) sits where short everyday lines
# land ("hello there" 0.006, "tell me more" 0.22, "I don't know" 0.004: 4 of 30 everyday chat lines were
# *concern*). Checked against the held-out sets before shipping: no crisis line there falls under the rule.
# Such a message decided alone is also never more than *concern* from the classifier: the crisis reply replaces
# the group's answer, and the encoder can give odd short lines crisis scores ("I have a plan to pass next
# time." 0.74); patterns and the context still make short lines a crisis ("i want to kms", "I have a plan." after
# "I can't go on"), and the concern opener still asks about safety.
SHORT_WORDS, SHORT_CONCERN = 5, 0.3

# A plan, a time, means at hand or a farewell. Alone such a line is often harmless ("I have a plan for the
# weekend"); right after a turn that already read as ideation (*concern* or above) it is a crisis. Decided alone,
# a line that matches it but uses no word of harm is at most *concern* (the encoder can read "I have a plan to
# pass next time." as a crisis, 0.74): a persona asks about safety instead of the group being replaced.
ESCALATION = re.compile(
    r"\b(?:i(?:'ve| have) (?:got )?a plan|i(?:'ve| have) decided|i know (?:how|when|where)|i(?:'m| am) (?:going|gonna) "
    r"(?:to )?do it|(?:it|i)(?:'s| is| will be|'ll be) (?:going to be )?(?:tonight|tomorrow|this (?:week(?:end)?|evening))|"
    r"(?:got|have|bought|ready) (?:the |my |some )?(?:pills|rope|gun|blade|razor)|wrote (?:letters|a letter|goodbye)|"
    r"goodbye (?:note|letter)s?|going there tonight|after every(?:one|body)(?:'s| is) asleep)", re.I)

# Indecision: "should I", "I don't know if/what", "not sure whether". Found in multi-turn chat probes: after a failed
# driving test "I just don't know if I should even try again." scored 0.95, a sick cat's surgery "I don't know what
# the right choice is." 0.81 and "Not sure if I should tell my mom." 0.87, so the crisis reply replaced the group
# (training lines of everyday indecision cost recall instead, docs/safety.md). Decided alone, such a line with no
# word of harm (`HARM_WORDS`) and none of going on living (`DESPAIR_WORDS`: "I don't know if I can keep going"
# stays a crisis) is at most *concern*: a persona asks about safety and names where to get help instead. Checked
# against every English held-out set, the training pool and the everyday openings: no held-out crisis line falls
# under the rule (tests/test_safety.py::test_indecision_alone_is_at_most_concern).
INDECISION = re.compile(
    r"\b(?:i (?:just |really |honestly )?(?:don'?t|do not) know (?:if|whether|what|which|how)|"
    r"(?:not|never) (?:sure|certain) (?:if|whether|what|which)|i can'?t (?:decide|choose|make up my mind)|"
    r"should i (?:even |just |really )?(?:try|bother|keep|go|do|say|tell|choose|pick|take|stay|leave|quit)|"
    r"torn between|what (?:the right|the best) (?:choice|decision|thing) is)", re.I)
# Giving up, asked right after a crisis turn ("should I even try?" after "I want to die."): a crisis, whatever the
# message scores alone (the stack's context floor is higher than MiniLM's was).
GIVING_UP = re.compile(r"\bshould i (?:even |just |really )?(?:try|bother|keep (?:going|trying)|go on|carry on)\b|"
                       r"\bwhat'?s the point\b|\bwhy (?:even )?bother\b", re.I)
DESPAIR_WORDS = re.compile(
    r"\b(?:keep going|go on|carry on|be here|here anymore|live|living|lives?|alive|exist\w*|make it|hold on|"
    r"survive|wak(?:e|ing) up|point|anymore|disappear\w*|gone|end|ending|over|escape|stop)\b", re.I)

# Grief for someone else (found by a newcomer: "My grandad's watch stopped working the week after his
# funeral ..." got the crisis reply). Decided alone, a message about another's death or its rites that says
# nothing of the writer's own risk (`OWN_RISK`) is at most *concern*: the group answers, Anchor asks gently.
GRIEF = re.compile(
    r"\b(?:funeral|coffin|casket|grave(?:side|stone)?|headstone|memorial|burial|ashes|the wake|eulogy|cremat\w*|"
    r"passed (?:away|on)|(?:he|she|they|it) died|died (?:last|this|in|on|a|two|three|\d)|death of (?:my|our)|"
    r"since (?:he|she|they|mum|mom|dad) (?:died|passed|went))\b", re.I)
OWN_RISK = re.compile(
    r"\b(?:(?:kill|hurt|harm|cut|end) myself|my (?:own )?life|join (?:him|her|them)|be with (?:him|her|them) (?:again|soon)|"
    r"(?:want|wish|wanna|ready) (?:to )?(?:die|go too|be gone|not be here|follow)|can'?t (?:go on|live|do this anymore|keep going)|"
    r"no point|end it|(?:not|never) wake|(?:don'?t|do not) want to (?:be here|live|wake)|next to (?:him|her|them) (?:soon|tonight)|"
    r"my (?:own )?(?:funeral|will)|if i died|i (?:could |would |might )?die|want out|won'?t be (?:long|around|here)|"
    r"go(?:ing)? through with it|do it (?:tonight|tomorrow|soon|now)|how (?:long|many|much))", re.I)

# Everyday endings and idioms (written against crisis_categories.txt): the classifier reads "I want this
# week to end", "the last of my tablets", "shoot me a message" and "killing time" as crises. Decided alone, with
# nothing of the writer's own risk (`OWN_RISK`), an everyday ending is at most *concern*, and an idiom whose text
# holds no other word of harm or despair once the idiom is taken out is *none*.
EVERYDAY_END = re.compile(
    r"\b(?:this|the|my|that|today'?s|tonight'?s|these|our)\s+(?:\w+\s+){0,2}(?:week|weekend|day|shift|semester|term|"
    r"exams?|flu|cold|cough|job|month|year|project|meeting|course|season|lecture|class|trip|contract|lease|deadline|"
    r"tour|winter|summer|heatwave|commute|rota|placement|internship|sprint|quarter|drama|nightmare)s?\s+(?:to\s+)?"
    r"(?:(?:be|is|was|'s|finally)\s+)?(?:end|over|finish|done)\b"
    r"|\b(?:last|rest|end|final)\s+(?:\w+\s+)?of\s+(?:my|the|these|those)\s+(?:\w+\s+)?(?:tablets|pills|antibiotics|"
    r"medicine|medication|meds|prescription|course|steroids|inhaler|drops)\b"
    r"|\bcourse of (?:antibiotics|steroids|medicine|treatment|tablets|pills)\b"
    r"|\bquit(?:ting)?\s+(?:this|my|the)\s+(?:\w+\s+)?(?:job|course|team|gym|band|club|degree)\b", re.I)
IDIOMS = re.compile(
    r"\b(?:shoot|drop|fire|ping|send) me (?:a |an )?(?:quick )?(?:message|text|line|dm|email|note|msg)\b"
    r"|\bkill(?:ing)? (?:some |a bit of |the )?time\b|\bdying (?:to|for)\b|\bkill(?:ing|ed) it\b"
    r"|\b(?:murder|kill) (?:a|for a|for an) (?:\w+ )?(?:coffee|pint|burger|pizza|beer|curry|tea|kebab|drink)\b"
    r"|\bdead (?:tired|on my feet|beat)\b|\bto die for\b|\bmy (?:phone|battery|laptop|car|plant|charger)\b[^.!?]{0,20}\bdied\b"
    r"|\b(?:keep|kept|keeps) dying (?:on|in|at)\b|\bhang(?:ing)? out\b|\bjump(?:ed|ing)? at the chance\b"
    r"|\b(?:this|it|you|that)(?:'re|'s| is| are) killing me\b|\bi'?m (?:literally )?dead (?:lol|lmao|haha)", re.I)


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


def _result(tier: str, score: float, layer: str, matched: str = "") -> CrisisResult:
    return CrisisResult(tier == CRISIS, matched, tier, round(float(score), 4), layer)


class CrisisDetector:
    """The layered detector; thresholds come from the classifier's cross-validated metadata.

    `classifier` / `reply_classifier`: the message and reply classifiers (default: the shipped ones, loaded on
    first use, once per process); `use_classifier=False` runs the patterns alone. `multilingual`: the USE layer
    (`mascot.safety.multilingual`; default: the shipped one, loaded on first use, when `classifier` is the
    shipped one too); `use_multilingual=False` leaves it out; `use_only=True` scores every message with it alone. `events`: the log every
    decision is recorded in (None: nothing is recorded). `llm_judge`: the optional gray-zone judge
    (`mascot.safety.llm_judge.make_gray_zone_judge`)."""

    def __init__(self, classifier: Classifier | None = None, reply_classifier: Classifier | None = None,
                 use_classifier: bool = True, events: SafetyLog | None = None,
                 llm_judge: LLMGrayZoneJudge | None = None, multilingual: MultilingualLayer | None = None,
                 use_multilingual: bool | None = None, use_only: bool = False) -> None:
        self._classifier = classifier
        self._reply_classifier = reply_classifier
        self.use_classifier = use_classifier
        self.events = events
        self.llm_judge = llm_judge
        self._multilingual = multilingual
        # the stack's thresholds belong to the shipped MiniLM classifier: by default the USE layer joins it only
        self.use_multilingual = (classifier is None or multilingual is not None) if use_multilingual is None else use_multilingual
        self.use_only = use_only  # the USE layer alone on every message (`safety eval` measures it so)

    @classmethod
    def load(cls, events: SafetyLog | None = None, llm_judge: LLMGrayZoneJudge | None = None) -> CrisisDetector:
        """The shipped detector with both classifiers and the USE layer loaded now (a missing model fails here, not
        on the first message; a USE layer that cannot load is left out with a warning); they are loaded once per
        process and shared by every detector."""
        from mascot.safety.classifier import load_classifier
        from mascot.safety.multilingual import load_multilingual

        return cls(load_classifier("messages"), load_classifier("replies"), events=events, llm_judge=llm_judge,
                   multilingual=load_multilingual(), use_multilingual=True)

    @property
    def classifier(self) -> Classifier:
        if self._classifier is None:
            from mascot.safety.classifier import load_classifier

            self._classifier = load_classifier("messages")
        return self._classifier

    @property
    def reply_classifier(self) -> Classifier:
        if self._reply_classifier is None:
            from mascot.safety.classifier import load_classifier

            self._reply_classifier = load_classifier("replies")
        return self._reply_classifier

    @property
    def multilingual(self) -> MultilingualLayer | None:
        """The USE layer (`mascot.safety.multilingual`), loaded on first use; None when switched off or when it
        could not load (then the MiniLM layer decides alone, as before it existed)."""
        if self._multilingual is None and self.use_multilingual:
            from mascot.safety.multilingual import load_multilingual

            self._multilingual = load_multilingual()
            if self._multilingual is None:
                self.use_multilingual = False  # warned once by load_multilingual; never retried per message
        return self._multilingual if self.use_multilingual else None

    def scorer(self, english: bool, text: str = "") -> tuple[object, dict[str, float], str]:
        """(scorer, thresholds, layer name) for a message `text`: the MiniLM + USE stack for English, USE alone
        otherwise (with its language's thresholds, where it has them); without the USE layer, the MiniLM classifier
        with its own thresholds."""
        layer = self.multilingual
        if layer is None:
            t_crisis, t_concern = self.thresholds
            return self.classifier, {"crisis": t_crisis, "concern": t_concern, "context": self.context_floor}, "classifier"
        if english and not self.use_only:
            from mascot.safety.multilingual import StackedScorer

            return StackedScorer(self.classifier, layer), layer.thresholds(True), "classifier"
        return layer, layer.thresholds(False, text), "multilingual"

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

    def record(self, kind: str, tier: str, score: float, layer: str, session_id: str = "") -> None:
        """Write one decision to the event log, if the detector has one."""
        if self.events is not None:
            self.events.record(kind, tier, score, layer, session_id)

    # -- user messages
    def check(self, text: str | None, history: Sequence[str] = (), judge: LLMGrayZoneJudge | None = None,
              session_id: str = "", record: bool = True) -> CrisisResult:
        """Decide the tier of `text` given the earlier user turns `history` (oldest first); `judge` overrides
        the detector's `llm_judge`. With `record`, the decision goes to the event log.

        Never raises: an internal error is logged and returns *concern*."""
        try:
            result = self._check(text, list(history), judge if judge is not None else self.llm_judge)
        except Exception as exc:  # noqa: BLE001 - fail safe on anything, by design
            log.exception("crisis check failed (%s); failing safe to concern", type(exc).__name__)
            result = _result(CONCERN, 0.0, "error")
        if record:
            self.record(INPUT, result.tier, result.score, result.layer, session_id)
            if result.tier != NONE:
                log.warning("crisis check: tier=%s score=%.3f layer=%s session=%s", result.tier, result.score,
                            result.layer, session_id)
        return result

    def _check(self, text: str | None, history: list[str], judge: LLMGrayZoneJudge | None) -> CrisisResult:
        clean = clip(text or "")
        matched = match_pattern(clean)
        if matched:
            return _result(CRISIS, 1.0, "pattern", matched)
        english = reads_as_english(clean)
        # outside English the classifier cannot read the message: gray-zone words (means, goodbyes) give a concern
        gray = "" if english else match_concern(clean)
        if not self.use_classifier:
            return _result(CONCERN, 0.0, "pattern-concern", gray) if gray else _result(NONE, 0.0, "pattern")
        scorer, thresholds, layer = self.scorer(english, clean)
        result = self._classified(clean, history, judge, scorer, thresholds, layer, english)
        if not english and result.tier == CRISIS and layer == "classifier" and result.layer != "llm":
            # the classifier reads English; outside it, its crisis reading is only a concern (mascot.safety.language)
            return _result(CONCERN, result.score, "classifier-language")
        if gray and result.tier == NONE:
            return _result(CONCERN, result.score, "pattern-concern", gray)
        return result

    def _classified(self, clean: str, history: list[str], judge: LLMGrayZoneJudge | None, scorer,  # type: ignore[no-untyped-def]
                    thresholds: dict[str, float], layer: str, english: bool) -> CrisisResult:
        """The classifier and context layers' decision on a message no pattern matched, by `scorer` against
        `thresholds` (`scorer(english)`)."""
        previous = [clip(t) for t in history[-(CONTEXT_TURNS - 1) :] if t and has_words(t)]
        if not has_words(clean) and not previous:
            return _result(NONE, 0.0, "empty")
        t_crisis, t_concern, floor = thresholds["crisis"], thresholds["concern"], thresholds["context"]
        # Each earlier turn alone (cached: each was scored when it was the latest message).
        s_turns = [float(v) for v in scorer.score(previous)] if previous else []
        msg = clean if has_words(clean) else ""
        if not s_turns or max(s_turns) < floor:
            # No earlier turn is even faintly suspicious alone: they can neither raise nor explain away this
            # message, so it is decided alone (one encoder pass instead of a batch of three).
            s_msg = float(scorer.score([msg])[0])
            tier = CRISIS if s_msg >= t_crisis else CONCERN if s_msg >= t_concern else NONE
            norm = normalise(clean)
            # the short, plan and indecision rules read English words: elsewhere the scores decide
            harmless_words = english and tier != NONE and not HARM_WORDS.search(norm)
            if harmless_words and len(clean.split()) <= SHORT_WORDS:
                if tier == CRISIS:  # short and harmless-sounding: a persona asks instead of replacing the group
                    return _result(CONCERN, s_msg, "classifier-short")
                if s_msg < SHORT_CONCERN:
                    return _result(NONE, s_msg, "classifier-short")  # "hello there", "tell me more" (see SHORT_WORDS)
            if harmless_words and tier == CRISIS:  # a plan or a time alone, or "should I ...?" alone: a persona asks
                if ESCALATION.search(norm):
                    return _result(CONCERN, s_msg, "classifier-plan")  # (see ESCALATION)
                if INDECISION.search(norm) and not DESPAIR_WORDS.search(norm):
                    return _result(CONCERN, s_msg, "classifier-indecision")  # (see INDECISION)
            if english and tier == CRISIS and not OWN_RISK.search(norm):
                if GRIEF.search(norm):
                    return _result(CONCERN, s_msg, "classifier-grief")  # someone else's death (see GRIEF)
                if IDIOMS.search(norm):
                    rest = IDIOMS.sub(" ", norm)
                    plain = not HARM_WORDS.search(rest) and not DESPAIR_WORDS.search(rest)
                    return _result(NONE if plain else CONCERN, s_msg, "classifier-idiom")  # (see IDIOMS)
                if EVERYDAY_END.search(norm):
                    return _result(CONCERN, s_msg, "classifier-everyday")  # (see EVERYDAY_END)
            return _result(tier, s_msg, layer)
        window = "\n".join([*previous, clean])
        earlier = "\n".join(clip(t) for t in history[-CONTEXT_TURNS:] if t and has_words(t))
        s_msg, s_win, s_prev = (float(v) for v in scorer.score([msg, window, earlier]))
        if s_msg >= t_crisis and s_win >= floor:  # the context does not explain it away
            return _result(CRISIS, s_msg, layer)
        if max(s_turns) >= t_concern and ESCALATION.search(normalise(clean)):  # ideation, then a plan or means
            return _result(CRISIS, max(s_turns), "context")
        if s_win >= t_crisis and s_msg >= floor:  # read with the earlier turns, this message is a crisis
            return _result(CRISIS, s_win, "context")
        if s_prev >= t_crisis and english and GIVING_UP.search(normalise(clean)):
            return _result(CRISIS, s_prev, "context")  # "should I even try?" right after ideation (see GIVING_UP)
        if max(s_msg, s_win) >= t_concern:  # either reading is in the gray zone
            if judge is not None and judge.confirms_crisis([*previous, clean]):
                return _result(CRISIS, max(s_msg, s_win), "llm")
            return _result(CONCERN, max(s_msg, s_win), layer if s_msg >= s_win else "context")
        if s_prev >= t_crisis:
            return _result(CONCERN, s_prev, "context")  # right after a crisis turn, keep asking about safety
        return _result(NONE, max(s_msg, s_win), layer)

    # -- persona replies
    def check_reply(self, text: str | None, session_id: str = "", record: bool = True,
                    classifier: bool = True, risky: bool = True) -> ReplyVerdict:
        """Whether a persona reply encourages self-harm or gives means (`mascot.safety.guard.judge_reply`). Never
        raises: on an internal error the reply is blocked (replaced by the safe text). `classifier=False` runs the
        patterns only (for a reply's first few words, which the classifier, trained on whole replies, misreads).
        `risky=False` (the chat, when the user's message was *none*): the classifier may only block text that
        uses a word of self-harm, death or means (`HARM_WORDS`)."""
        use = self.use_classifier and classifier
        try:
            verdict = judge_reply(text or "", (lambda: self.reply_classifier) if use else None, risky)
        except Exception as exc:  # noqa: BLE001 - fail safe on anything, by design
            log.exception("output check failed (%s); replacing the reply", type(exc).__name__)
            verdict = ReplyVerdict(True, 0.0, "error")
        if record:
            self.record(OUTPUT, "replaced" if verdict.blocked else "passed", verdict.score, verdict.layer, session_id)
            if verdict.blocked:
                log.warning("output check replaced a reply: score=%.3f layer=%s session=%s", verdict.score, verdict.layer, session_id)
        return verdict

    def guard(self, session_id: str = "", risky: bool = True) -> ReplyGuard:
        """A guard for one streamed persona reply (`mascot.safety.guard.ReplyGuard`)."""
        return ReplyGuard(self, session_id, risky)


_DETECTOR: list[CrisisDetector] = []


def default_detector() -> CrisisDetector:
    """A detector with the shipped classifiers and no event log (it records nothing), made once per process: for
    checks outside a chat session (warm-up, tests, scripts). A chat builds its own with its log."""
    if not _DETECTOR:
        _DETECTOR.append(CrisisDetector())
    return _DETECTOR[0]


def check_crisis(text: str, history: Sequence[str] = (), session_id: str = "") -> CrisisResult:
    """Decide the tier of `text` (given earlier user turns) with `default_detector()` (nothing is recorded)."""
    return default_detector().check(text, history, session_id=session_id)
