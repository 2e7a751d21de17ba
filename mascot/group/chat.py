"""GroupChat: the one conversation step (safety check -> director -> speaker -> output guard) used by the
live chat, evaluation and training rollouts, so every consumer scores what a chat user gets.

`respond` streams events for one dialogue (the UI); `step_batch` and `respond_batch` step many dialogues in
lockstep, batching director and speaker calls (rollouts and evaluation). Both take each turn through the same
`SafetyPolicy`: a concern-tier message is first answered by the pack's concern opener with the help note, and
every reply passes the output guard; a policy can switch either off, and evaluation reports say so.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from mascot.backends.base import Backend, GenerationParams
from mascot.errors import InputError, PersonaError
from mascot.group.dialogue import USER, Dialogue, Turn
from mascot.group.director import (
    DIRECTOR_ADAPTER,
    Decision,
    Director,
    DirectorState,
    find_mentions,
    make_director,
)
from mascot.group.personas import Persona, concern_persona
from mascot.group.speaker import Selector, Speaker
from mascot.safety.detector import CrisisDetector, CrisisResult, default_detector
from mascot.safety.llm_judge import make_gray_zone_judge
from mascot.safety.responses import CRISIS_REPLY, CRISIS_SPEAKER, concern_directive, with_help_note

MAX_MESSAGE_CHARS = 4000


@dataclass(frozen=True)
class SafetyPolicy:
    """What the crisis check does to a group turn, the same in the chat, evaluation and rollouts."""

    concern_opener: bool = True  # a concern-tier message: the concern opener asks about safety first, with the help note
    output_guard: bool = True  # a persona reply is screened sentence by sentence and replaced if it fails
    record: bool = True  # user messages' checks go to the detector's event log (when it has one)

    def describe(self) -> str:
        parts = [name for name, on in (("concern opener", self.concern_opener), ("output guard", self.output_guard)) if on]
        return ", ".join(parts) if parts else "off (the speakers' raw replies)"


LIVE = SafetyPolicy()  # the chat
OFFLINE = SafetyPolicy(record=False)  # evaluation and rollouts: what a chat user gets, nothing logged
UNGUARDED = SafetyPolicy(concern_opener=False, output_guard=False, record=False)  # the speakers' own text


@dataclass
class DirectiveEvent:
    """The director decided a step (a directive, or yielding the floor)."""

    decision: Decision


@dataclass
class TokenEvent:
    """A speaker's reply so far (cleaned), emitted while streaming."""

    speaker: str
    text: str


@dataclass
class TurnEvent:
    """A finished persona turn, already appended to the dialogue."""

    turn: Turn


@dataclass
class CrisisEvent:
    """The crisis check fired: the fixed safety reply replaced the group's replies."""

    turn: Turn


Event = DirectiveEvent | TokenEvent | TurnEvent | CrisisEvent


def validate_message(text: str | None, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """Reject empty or over-long user messages with a clear reason; returns the stripped text."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("Your message is empty: type something before sending.")
    text = text.strip()
    if len(text) > max_chars:
        raise InputError(
            f"Your message is {len(text):,} characters long; the limit is {max_chars:,}. "
            "Shorten it or split it into several messages."
        )
    return text


def _last(values: Iterator[str]) -> str:
    tail = deque(values, maxlen=1)
    return tail[0] if tail else ""


class GroupChat:
    """A companion group for one session: roster, director mode and speaker settings over a shared backend."""

    def __init__(
        self,
        backend: Backend,
        roster: list[Persona],
        mode: str = "prompted",
        max_speakers: int = 3,
        allow_repeat: bool = False,
        speaker_style: str = "persona",
        use_adapters: bool = True,
        speaker_params: GenerationParams | None = None,
        max_message_chars: int = MAX_MESSAGE_CHARS,
        director: Director | None = None,
        safety: CrisisDetector | None = None,
        min_speakers: int | None = None,
        policy: SafetyPolicy = LIVE,
        concern_opener: str = "",
        llm_safety_judge: bool = False,
        stems: bool = False,
        best_of: int = 1,
        selector: Selector | None = None,
        adapter_names: dict[str, str] | None = None,
    ) -> None:
        if not roster:
            raise PersonaError("No persona is switched on: turn at least one persona on to chat.")
        self.backend = backend
        self.roster = roster
        names = adapter_names or {}  # persona keys and "director" -> backend adapter names (a live run's version)
        self.director = director or make_director(mode, backend, max_speakers, allow_repeat, min_speakers,
                                                  adapter_name=names.get("director", DIRECTOR_ADAPTER))
        self.speaker = Speaker(backend, speaker_params, style=speaker_style, use_adapters=use_adapters, stems=stems,
                               best_of=best_of, selector=selector, adapter_names=names)
        self.max_message_chars = max_message_chars
        self.safety = safety or default_detector()
        self.policy = policy
        self.concern_opener = concern_persona(roster, concern_opener)
        # a second opinion on gray-zone messages, only for openai/vllm backends and only when switched on
        self.safety_judge = make_gray_zone_judge(backend, enabled=llm_safety_judge)

    def persona(self, name: str) -> Persona:
        for p in self.roster:
            if p.name == name:
                return p
        raise PersonaError(f"{name!r} is not an active persona ({', '.join(p.name for p in self.roster)}).")

    # --- the user's message -------------------------------------------------------------------------------

    def _start(self, dialogue: Dialogue, user_text: str | None, session_id: str = "") -> CrisisResult:
        """Append (or reuse, for regenerate) the user turn and check it, with the earlier user turns as context;
        the decision is kept on the turn (`meta["safety"]`) for the steps that follow."""
        if user_text is None:  # regenerate: drop this round's persona turns, keep the user turn
            i = dialogue.last_user_index()
            if i < 0:
                raise InputError("There is no user message to regenerate a reply for.")
            del dialogue.turns[i + 1 :]
        else:
            dialogue.add(Turn(USER, validate_message(user_text, self.max_message_chars)))
        return self._check_user_turn(dialogue, session_id)

    def _check_user_turn(self, dialogue: Dialogue, session_id: str = "") -> CrisisResult:
        i = dialogue.last_user_index()
        turn = dialogue.turns[i]
        history = [t.text for t in dialogue.turns[:i] if t.is_user]
        result = self.safety.check(turn.text, history, judge=self.safety_judge, session_id=session_id,
                                   record=self.policy.record)
        turn.meta["safety"] = result.tier
        return result

    def _user_tier(self, dialogue: Dialogue) -> str:
        """The safety tier of the message this round answers (checked now if nothing checked it yet)."""
        i = dialogue.last_user_index()
        if i < 0:
            return "none"
        if "safety" not in dialogue.turns[i].meta:
            self._check_user_turn(dialogue)
        return dialogue.turns[i].meta["safety"]

    @staticmethod
    def _crisis_turn(result: CrisisResult) -> Turn:
        return Turn(CRISIS_SPEAKER, CRISIS_REPLY, meta={"crisis": True, "matched": result.matched, "tier": result.tier,
                                                        "score": result.score, "layer": result.layer})

    def add_user_message(self, dialogue: Dialogue, text: str) -> Turn | None:
        """Append a user message (from a simulated user); returns the fixed safety turn, already
        appended, when the crisis check fires, else None."""
        result = self._start(dialogue, text)
        return dialogue.add(self._crisis_turn(result)) if result.is_crisis else None

    # --- one step: who speaks, then what they say -----------------------------------------------------------

    def _opens_concern(self, dialogue: Dialogue) -> bool:
        """This step opens the answer to a concern-tier message (the first persona turn after it)."""
        return (self.policy.concern_opener and not dialogue.current_round()
                and self._user_tier(dialogue) == "concern")

    def _concern_decision(self) -> Decision:
        return Decision(concern_directive(self.concern_opener), "safety")

    def _guard(self, dialogue: Dialogue, session_id: str = ""):  # type: ignore[no-untyped-def]
        """The output guard for this round's replies (None when the policy switches it off)."""
        if not self.policy.output_guard:
            return None
        return self.safety.guard(session_id, risky=self._user_tier(dialogue) != "none")

    def _finish(self, dialogue: Dialogue, decision: Decision, reply: str, guard, opens_concern: bool,  # type: ignore[no-untyped-def]
                stopped: bool | None = None, selection: dict[str, object] | None = None) -> Turn:
        """Append a persona's reply as a turn, with the concern turn's help note, the safety outcome and, with
        best-of-N on, what the selector saw (`meta["selection"]`)."""
        meta: dict[str, object] = {"source": decision.source}
        if selection:
            meta["selection"] = selection
        if stopped is not None:
            meta["stopped"] = stopped
        meta["safety"] = "replaced" if guard is not None and guard.replaced else self._user_tier(dialogue)
        if opens_concern:
            reply = with_help_note(reply)
        return dialogue.add(Turn(decision.directive.speaker, reply or "…", decision.directive, meta))  # type: ignore[union-attr]

    # --- streaming: the live chat ---------------------------------------------------------------------------

    def respond(
        self,
        dialogue: Dialogue,
        user_text: str | None,
        *,
        seed: int = 0,
        forced: list[str] | None = None,
        stop: threading.Event | None = None,
        session_id: str = "",
    ) -> Iterator[Event]:
        """Add the user's message (None = regenerate the last round) and stream the group's replies."""
        safety = self._start(dialogue, user_text, session_id)
        if safety.is_crisis:
            yield CrisisEvent(dialogue.add(self._crisis_turn(safety)))
            return
        forced = list(forced or []) or find_mentions(dialogue.last_user_text(), self.roster)
        for step in range(len(self.roster) + len(forced) + 1):
            if stop is not None and stop.is_set():
                return
            opens_concern = self._opens_concern(dialogue)
            decision = (self._concern_decision() if opens_concern
                        else self.director.decide(DirectorState(dialogue, self.roster, seed, forced)))
            yield DirectiveEvent(decision)
            if decision.directive is None:
                return
            persona = self.persona(decision.directive.speaker)
            guard = self._guard(dialogue, session_id)  # only checked sentences reach the user
            selection: dict[str, object] = {}
            partials = self.speaker.stream(persona, self.roster, dialogue, decision.directive, seed=seed * 101 + step,
                                           info=selection)
            reply, stopped = "", False
            for reply in (guard.stream(partials) if guard is not None else partials):
                yield TokenEvent(persona.name, reply)
                if stop is not None and stop.is_set():
                    stopped = True
                    break
            yield TurnEvent(self._finish(dialogue, decision, reply, guard, opens_concern, stopped, selection))
            if stopped:
                return

    def run(self, dialogue: Dialogue, user_text: str | None, *, seed: int = 0, forced: list[str] | None = None) -> list[Turn]:
        """Non-streaming `respond`: returns the turns added after the user message."""
        return [e.turn for e in self.respond(dialogue, user_text, seed=seed, forced=forced) if isinstance(e, (TurnEvent, CrisisEvent))]

    # --- batched: evaluation and rollouts -------------------------------------------------------------------

    def step_batch(self, dialogues: list[Dialogue], seeds: list[int], decisions: list[Decision | None] | None = None,
                   step: int = 0) -> list[tuple[Decision, Turn | None]]:
        """One step for each dialogue, as `respond` takes it: the concern opener or the director decides (in one
        batched call), the chosen speakers reply in batched calls (one per adapter), and each reply passes the
        output guard. `decisions[i]`, when given, replaces the director for dialogue i (a Stage-2 directive under
        evaluation); it is still checked against the roster and the no-repeat rule. Returns (decision, the new
        turn or None when the director yields) per dialogue."""
        overrides = decisions or [None] * len(dialogues)
        concern = [self._opens_concern(d) for d in dialogues]
        states = [DirectorState(dialogues[i], self.roster, seeds[i], find_mentions(dialogues[i].last_user_text(), self.roster))
                  for i in range(len(dialogues))]
        out: list[Decision] = [Decision(None, "")] * len(dialogues)
        ask = [i for i, d in enumerate(overrides) if d is None and not concern[i]]
        for i, dec in zip(ask, self.director.decide_batch([states[i] for i in ask]) if ask else []):
            out[i] = dec
        for i, dec in enumerate(overrides):
            if concern[i]:
                out[i] = self._concern_decision()
            elif dec is not None:
                out[i] = self.director.check(states[i], dec)
        speaking = [(i, dec) for i, dec in enumerate(out) if dec.directive is not None]
        items = [(self.persona(dec.directive.speaker), self.roster, dialogues[i], dec.directive) for i, dec in speaking]  # type: ignore[union-attr]
        infos: list[dict[str, object] | None] = [{} for _ in items]
        replies = self.speaker.reply_batch(items, seed=(seeds[0] if seeds else 0) * 101 + step, infos=infos) if items else []
        turns: list[Turn | None] = [None] * len(dialogues)
        for (i, dec), reply, info in zip(speaking, replies, infos):
            guard = self._guard(dialogues[i])
            if guard is not None:
                reply = _last(guard.stream([reply]))
            turns[i] = self._finish(dialogues[i], dec, reply, guard, concern[i], selection=info)
        return list(zip(out, turns))

    def respond_batch(self, dialogues: list[Dialogue], user_texts: list[str | None], seeds: list[int]) -> list[list[Turn]]:
        """Step many dialogues in lockstep (each user text added and checked as `respond` does), batching the
        director and each adapter's speaker calls."""
        added: list[list[Turn]] = [[] for _ in dialogues]
        live: list[int] = []
        for i, (d, text) in enumerate(zip(dialogues, user_texts)):
            result = self._start(d, text)
            if result.is_crisis:
                added[i].append(d.add(self._crisis_turn(result)))
            else:
                live.append(i)
        for step in range(len(self.roster) + 1):
            if not live:
                break
            results = self.step_batch([dialogues[i] for i in live], [seeds[i] for i in live], step=step)
            for i, (_, turn) in zip(live, results):
                if turn is not None:
                    added[i].append(turn)
            live = [i for i, (_, turn) in zip(live, results) if turn is not None]
        return added
