"""The director (meta-agent): each step it names the next speaker with an action and a tone, or
yields the floor back to the user.

Modes (registry `DIRECTOR_MODES`): `trained` (LLM director through its LoRA adapter), `prompted`
(base model with the director prompt), `round-robin`, `random` (the paper's MASCOT-C ablation) and
`manual` (the user picks). Whatever a mode proposes is validated against the active roster and the
per-turn bounds; invalid or unparsable output falls back deterministically and is logged.
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass, field

from mascot.backends.base import Backend, GenerationParams, Messages
from mascot.errors import BackendError, DirectorParseError, unknown_name
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.personas import Persona
from mascot.group.prompts import DIRECTOR_PREFILL, director_messages

log = logging.getLogger(__name__)

DIRECTOR_MODES = ("trained", "prompted", "round-robin", "random", "manual")
YIELD_WORDS = {"none", "user", "nobody", "no one", "noone", "stop", "end", "yield", "<user>", "[user]"}
DIRECTOR_ADAPTER = "director"
LLM_MIN_SPEAKERS = 3  # every active persona answers an ordinary message once (bounded by max speakers and the roster):
# measured on held-out scripts, the group score is higher with three voices than when the director may yield after two
# (docs/stage2.md); `min_speakers` / `--min-speakers 2` lets the director give the floor back earlier


@dataclass
class Decision:
    """One director step: a directive, or None to yield; `source` says how it was reached."""

    directive: Directive | None
    source: str
    raw: str = ""
    note: str = ""

    @property
    def yields(self) -> bool:
        return self.directive is None


@dataclass
class DirectorState:
    """What the director sees for one dialogue at one step."""

    dialogue: Dialogue
    roster: list[Persona]
    seed: int
    forced: list[str] = field(default_factory=list)  # persona names the user asked for (@Name / manual)

    def rng(self, salt: int = 0) -> random.Random:
        return random.Random(self.seed * 7919 + salt)


def _with_defaults(p: Persona, action: str = "", tone: str = "") -> Directive:
    return Directive(p.name, action.strip() or p.default_action, tone.strip() or p.default_tone)


def parse_directive(raw: str, roster: list[Persona]) -> Directive | None:
    """Parse raw director output (JSON, the paper's `Agent:/Action:/Tone:` lines, or a bare name).

    Returns None when the director yields to the user; raises DirectorParseError when the text
    names no one on the roster.
    """
    text = raw.strip()
    if not text:
        raise DirectorParseError("The director returned an empty answer.")
    fields: dict[str, str] = {}
    m = re.search(r"\{.*?\}", text, flags=re.S)
    if m:
        try:
            obj = json.loads(m.group(0))
            if isinstance(obj, dict):
                fields = {str(k).lower(): str(v) for k, v in obj.items()}
        except json.JSONDecodeError:
            pass
    if not fields:
        for key, value in re.findall(r"(?im)^\s*(agent|speaker|action|tone)\s*:\s*(.+)$", text):
            fields[key.lower()] = value.strip()
    if not fields:  # e.g. the JSON was cut off: `{"speaker": "Anchor", "action": "Vali`
        m = re.search(r'"(?:speaker|agent)"\s*:\s*"([^"]+)"', text)
        fields = {"speaker": m.group(1)} if m else {"speaker": text.splitlines()[0]}
    name = (fields.get("speaker") or fields.get("agent") or "").strip()
    if name.strip("@*\"' .").lower() in YIELD_WORDS:
        return None
    for p in roster:
        if p.matches(name):
            return _with_defaults(p, fields.get("action", ""), fields.get("tone", ""))
    raise DirectorParseError(
        f"The director named {name[:40]!r}, who is not an active persona "
        f"({', '.join(p.name for p in roster)})."
    )


def find_mentions(text: str, roster: list[Persona]) -> list[str]:
    """Persona names addressed with `@Name` in a user message, in order of appearance."""
    found: list[str] = []
    for m in re.finditer(r"@([\w\-]+(?:[ \-][A-Z][\w\-]*)?)", text):
        token = m.group(1)
        for candidate in (token, token.split()[0]):
            hit = next((p.name for p in roster if p.matches(candidate) or p.key == candidate.lower()), None)
            if hit:
                if hit not in found:
                    found.append(hit)
                break
    return found


def fallback_choice(state: DirectorState) -> Directive | None:
    """Deterministic fallback: the first persona (pack order) who has not spoken this round and did
    not speak last; None when everyone has spoken."""
    spoken = {t.speaker for t in state.dialogue.current_round()}
    last = state.dialogue.last_speaker()
    for p in state.roster:
        if p.name not in spoken and (p.name != last or len(state.roster) == 1):
            return _with_defaults(p)
    return None


class Director:
    """Base director: applies bounds, @mentions, the no-repeat rule and the fallback around
    the mode-specific `propose_batch`."""

    mode = "base"

    def __init__(self, max_speakers: int = 3, allow_repeat: bool = False, min_speakers: int = 1) -> None:
        if max_speakers < 1:
            raise ValueError(f"max_speakers must be at least 1, got {max_speakers}.")
        if min_speakers < 1:
            raise ValueError(f"min_speakers must be at least 1, got {min_speakers}.")
        self.max_speakers = max_speakers
        self.allow_repeat = allow_repeat
        self.min_speakers = min_speakers

    def floor(self, st: DirectorState) -> int:
        """How many personas must reply before the director may yield (bounded by max_speakers and the roster)."""
        return min(self.min_speakers, self.max_speakers, max(1, len(st.roster)))

    def allowed(self, st: DirectorState) -> list[Persona]:
        """Personas the director may pick now: the no-repeat rule (not already in this round, not the last
        speaker) unless repeats are allowed."""
        if self.allow_repeat:
            return list(st.roster)
        spoken = {t.speaker for t in st.dialogue.current_round()}
        last = st.dialogue.last_speaker()
        return [p for p in st.roster if p.name not in spoken and (p.name != last or len(st.roster) == 1)]

    def may_yield(self, st: DirectorState) -> bool:
        return len(st.dialogue.current_round()) >= self.floor(st)

    def propose_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        """Mode-specific proposals: (directive or None, source, raw text) per state."""
        raise NotImplementedError

    def decide(self, state: DirectorState) -> Decision:
        return self.decide_batch([state])[0]

    def decide_batch(self, states: list[DirectorState]) -> list[Decision]:
        decisions: list[Decision | None] = [None] * len(states)
        pending: list[int] = []
        for i, st in enumerate(states):
            n = len(st.dialogue.current_round())
            if st.forced:
                spoken = {t.speaker for t in st.dialogue.current_round()}
                todo = [name for name in st.forced if name not in spoken]
                if todo:
                    p = next(p for p in st.roster if p.name == todo[0])
                    decisions[i] = Decision(_with_defaults(p), "mention")
                else:
                    decisions[i] = Decision(None, "mention", note="every addressed persona has replied")
            elif n >= min(self.max_speakers, max(1, len(st.roster))):
                decisions[i] = Decision(None, "bounds", note=f"{n} personas already replied")
            else:
                pending.append(i)
        if pending:
            proposals = self.propose_batch([states[i] for i in pending])
            for i, (directive, source, raw) in zip(pending, proposals):
                decisions[i] = self._validate(states[i], directive, source, raw)
        return [d for d in decisions if d is not None]

    def check(self, st: DirectorState, decision: Decision) -> Decision:
        """Validate an externally supplied decision (a sampled Stage-2 directive) like a proposal."""
        return self._validate(st, decision.directive, decision.source, decision.raw)

    def _validate(self, st: DirectorState, directive: Directive | None, source: str, raw: str) -> Decision:
        n = len(st.dialogue.current_round())
        problem = ""
        if directive is None and n < self.floor(st) and source != "invalid":
            problem = "yielded before anyone replied" if n == 0 else f"yielded after {n} of at least {self.floor(st)} replies"
        elif directive is not None:
            spoken = {t.speaker for t in st.dialogue.current_round()}
            if directive.speaker == st.dialogue.last_speaker() and not self.allow_repeat and len(st.roster) > 1:
                problem = f"picked {directive.speaker} twice in a row"
            elif directive.speaker in spoken and not self.allow_repeat:
                problem = f"picked {directive.speaker}, who already replied this round"
        if source == "invalid":
            problem = raw_problem(raw)
        if not problem:
            return Decision(directive, source, raw)
        chosen = fallback_choice(st)
        log.info("director fallback (%s): %s -> %s", self.mode, problem, chosen.speaker if chosen else "yield")
        return Decision(chosen, "fallback", raw, note=problem)


def raw_problem(raw: str) -> str:
    return f"unusable director output {raw.strip()[:60]!r}"


class RoundRobinDirector(Director):
    """Personas speak in pack order, continuing the cycle across user turns."""

    mode = "round-robin"

    def propose_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        out: list[tuple[Directive | None, str, str]] = []
        for st in states:
            names = [p.name for p in st.roster]
            last = next((t.speaker for t in reversed(st.dialogue.turns) if t.speaker in names), None)
            start = (names.index(last) + 1) % len(names) if last else 0
            out.append((_with_defaults(st.roster[start]), self.mode, ""))
        return out


class RandomDirector(Director):
    """MASCOT-C ablation: a random number (1..max) of random personas, seeded per turn."""

    mode = "random"

    def propose_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        out: list[tuple[Directive | None, str, str]] = []
        for st in states:
            rng = st.rng()
            k = rng.randint(1, min(self.max_speakers, len(st.roster)))
            spoken = {t.speaker for t in st.dialogue.current_round()}
            if len(spoken) >= k:
                out.append((None, self.mode, ""))
                continue
            candidates = [p for p in st.roster if p.name not in spoken and p.name != st.dialogue.last_speaker()]
            pick = st.rng(len(spoken) + 1).choice(candidates or st.roster)
            out.append((_with_defaults(pick), self.mode, ""))
        return out


class ManualDirector(Director):
    """The user picks speakers (UI selection or @mentions); with no pick, the fallback speaks once."""

    mode = "manual"

    def propose_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        out: list[tuple[Directive | None, str, str]] = []
        for st in states:
            if st.dialogue.current_round():
                out.append((None, self.mode, ""))
            else:
                out.append((fallback_choice(st), "fallback", ""))
        return out


class LLMDirector(Director):
    """The prompted (base model) or trained (LoRA adapter) director.

    With `constrained=True` (what `make_director` builds for the chat) the speaker is chosen by scoring every allowed continuation of
    `{"speaker": "` (the allowed personas' names, plus `none` once the director may yield) under the
    model, so the directive names a valid persona every time. The action and tone follow (`details`):
    - `choose` (default): the model scores the persona's action menu after `{"speaker": "<name>", "action": "`,
      then its tone menu after the chosen action (`Persona.action_options`, `tone_options`; mean log-probability
      per token over the words that tell the options apart). Three short scoring passes, no sampling: a valid,
      meaningful directive every time, in about the time of writing one (benchmarks/director_latency.py;
      one pass with the tones scored after the default action measured slower: its batch repeats that text).
    - `generate`: free text, up to `detail_tokens` tokens, after the same prefix (what Stage-2 GRPO samples).
    - `default`: the persona's default action and tone (one scoring pass).
    A backend that cannot score falls back (logged, once) to generate-and-validate: free generation,
    parsing and the deterministic fallback.
    """

    DETAILS = ("choose", "generate", "default")

    def __init__(
        self,
        backend: Backend,
        adapter: str | None = None,
        max_speakers: int = 3,
        allow_repeat: bool = False,
        params: GenerationParams | None = None,
        min_speakers: int = 1,
        constrained: bool = False,
        detail_tokens: int = 24,
        details: str = "choose",
    ) -> None:
        super().__init__(max_speakers, allow_repeat, min_speakers)
        self.backend = backend
        self.adapter = adapter
        self.mode = "trained" if adapter else "prompted"
        self.params = params or GenerationParams(max_new_tokens=40, temperature=0.7, top_p=0.9, stop=("}",))
        self.constrained = constrained
        if details not in self.DETAILS:
            raise unknown_name("director details", details, self.DETAILS)
        self.detail_tokens = detail_tokens
        self.details = details
        self._warned = False

    def propose_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        if self.constrained:
            try:
                return self._constrained_batch(states)
            except BackendError as exc:
                if not self._warned:
                    log.warning("director: %s Falling back to generate-and-validate.", exc)
                    self._warned = True
                self.constrained = False
        return self._free_batch(states)

    def _free_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        chats = [self._chat(st) for st in states]
        seed = states[0].seed * 31 + len(states[0].dialogue.current_round())
        params = self.params.with_(prefill=DIRECTOR_PREFILL, seed=seed)
        completions = self.backend.generate(chats, params, adapter=self.adapter)
        out: list[tuple[Directive | None, str, str]] = []
        for st, c in zip(states, completions):
            raw = DIRECTOR_PREFILL + c.text + ("}" if "}" not in c.text else "")
            try:
                out.append((parse_directive(raw, st.roster), self.mode, raw))
            except DirectorParseError as exc:
                log.info("director parse error: %s", exc)
                out.append((None, "invalid", raw))
        return out

    def _chat(self, st: DirectorState) -> Messages:
        return director_messages(st.roster, st.dialogue, self.max_speakers, min_speakers=self.min_speakers)

    def choose_speakers(self, states: list[DirectorState], chats: list[Messages] | None = None) -> list[tuple[str, dict[str, float]]]:
        """The constrained speaker choice per state: (persona name or YIELD, score of each option)."""
        out = []
        for k, st in enumerate(states):
            options = [p.name for p in self.allowed(st)] + ([YIELD] if self.may_yield(st) else [])
            if not options:
                out.append((YIELD, {}))
                continue
            chat = chats[k] if chats is not None else self._chat(st)
            scores = self.backend.score(chat, [f'{o}"' for o in options], self.params.with_(prefill=DIRECTOR_PREFILL),
                                        adapter=self.adapter)
            best = max(range(len(options)), key=lambda i: scores[i])
            out.append((options[best], dict(zip(options, scores))))
        return out

    def _constrained_batch(self, states: list[DirectorState]) -> list[tuple[Directive | None, str, str]]:
        chats = [self._chat(st) for st in states]
        choices = self.choose_speakers(states, chats)
        out: list[tuple[Directive | None, str, str] | None] = [None] * len(states)
        todo = [i for i, (name, _) in enumerate(choices) if name != YIELD]
        for i, (name, _) in enumerate(choices):
            if name == YIELD:
                out[i] = (None, self.mode, DIRECTOR_PREFILL + 'none"}')
        if todo:
            personas = [next(p for p in states[i].roster if p.name == choices[i][0]) for i in todo]
            # one call per distinct prefill would serialise; the speaker name is part of each prompt instead
            texts = self._details([chats[i] for i in todo], personas, states[todo[0]].seed)
            for i, persona, text in zip(todo, personas, texts):
                raw = directive_prefill(persona.name) + text
                raw = raw if raw.rstrip().endswith("}") else raw + "}"
                try:
                    d = parse_directive(raw, states[i].roster) or _with_defaults(persona)
                except DirectorParseError:  # cannot happen for a roster name, but never crash a turn
                    d = _with_defaults(persona)
                out[i] = (d, self.mode, raw)
        return [o for o in out if o is not None]

    def _details(self, chats: list[Messages], personas: list[Persona], seed: int) -> list[str]:
        """The action and tone after each chosen speaker, as the text that closes the directive's JSON."""
        texts = [""] * len(chats)
        if self.details == "default" or self.detail_tokens <= 0:
            return texts
        if self.details == "choose":
            for i, (chat, persona) in enumerate(zip(chats, personas)):
                prefill = directive_prefill(persona.name)
                action = self._pick(chat, prefill, persona.action_options(), '", "tone": "')
                tone = self._pick(chat, f'{prefill}{action}", "tone": "', persona.tone_options(), '"}')
                texts[i] = f'{action}", "tone": "{tone}"}}'
            return texts
        by_name: dict[str, list[int]] = {}
        for i, p in enumerate(personas):
            by_name.setdefault(p.name, []).append(i)
        for name, idx in by_name.items():
            params = self.params.with_(prefill=directive_prefill(name), seed=seed, max_new_tokens=self.detail_tokens)
            for i, c in zip(idx, self.backend.generate([chats[i] for i in idx], params, adapter=self.adapter)):
                texts[i] = c.text
        return texts

    def _pick(self, chat: Messages, prefill: str, options: list[str], closer: str) -> str:
        """The option with the highest mean token log-probability after `prefill`, scored on its distinguishing
        opening words (`distinct_openings`; a whole option is closed by `closer`)."""
        if len(options) <= 1:
            return options[0] if options else ""
        conts = [o if o != full else o + closer for o, full in zip(distinct_openings(options), options)]
        scores = self.backend.score(chat, conts, self.params.with_(prefill=prefill), adapter=self.adapter)
        means = [s / max(1, self.backend.count_tokens(c)) for s, c in zip(scores, conts)]
        return options[max(range(len(options)), key=means.__getitem__)]


YIELD = "none"


def distinct_openings(options: list[str], words: int = 3) -> list[str]:
    """Each option cut to its first `words` words, or more where that opening is shared with another option.

    The director's choice among menu items is made on the words that tell them apart: scoring the rest adds
    decode time (about 15 ms per option on 2 cores) and little information."""
    out = []
    for o in options:
        parts = o.split()
        n = min(words, len(parts))
        while n < len(parts) and any(p != o and p.split()[:n] == parts[:n] for p in options):
            n += 1
        out.append(o if n >= len(parts) else " ".join(parts[:n]))
    return out


def directive_prefill(name: str) -> str:
    """The director's answer up to its action text, once the speaker is fixed."""
    return f'{DIRECTOR_PREFILL}{name}", "action": "'


def make_director(
    mode: str,
    backend: Backend | None = None,
    max_speakers: int = 3,
    allow_repeat: bool = False,
    min_speakers: int | None = None,
    adapter_name: str = DIRECTOR_ADAPTER,
) -> Director:
    """Build a director by mode name; `trained` needs a registered `director` adapter (`Engine.group` attaches
    it), else it falls back to `prompted` with a warning. `min_speakers` (default: `LLM_MIN_SPEAKERS` = 3 for the
    LLM directors, 1 for the rule-based ones) is how many personas reply before the director may give the floor back."""
    if mode not in DIRECTOR_MODES:
        raise unknown_name("director mode", mode, DIRECTOR_MODES)
    if mode in ("trained", "prompted"):
        if backend is None:
            raise ValueError(f"Director mode {mode!r} needs a backend.")
        adapter = adapter_name if mode == "trained" and adapter_name in backend.adapters else None
        if mode == "trained" and adapter is None:
            log.warning("No trained director adapter is loaded; the director runs prompted on the base model.")
        return LLMDirector(backend, adapter, max_speakers, allow_repeat,
                           min_speakers=LLM_MIN_SPEAKERS if min_speakers is None else min_speakers, constrained=True)
    cls = {"round-robin": RoundRobinDirector, "random": RandomDirector, "manual": ManualDirector}[mode]
    return cls(max_speakers, allow_repeat, min_speakers or 1)
