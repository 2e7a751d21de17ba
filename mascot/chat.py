"""GroupChat: the one rollout loop (director -> speakers) used by the live chat, training and eval.

`respond` streams events for one dialogue (the UI); `respond_batch` steps many dialogues in
lockstep, batching director and speaker calls (rollouts and evaluation).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from mascot.backends.base import Backend, GenerationParams
from mascot.dialogue import USER, Dialogue, Turn
from mascot.director import Decision, Director, DirectorState, find_mentions, make_director
from mascot.errors import InputError, PersonaError
from mascot.personas import Persona
from mascot.safety import (CRISIS_REPLY, CRISIS_SPEAKER, CrisisDetector, CrisisResult, concern_directive,
                           default_detector, make_gray_zone_judge, with_help_note)
from mascot.speaker import Speaker

MAX_MESSAGE_CHARS = 4000


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
    if text is None or not text.strip():
        raise InputError("Your message is empty: type something before sending.")
    text = text.strip()
    if len(text) > max_chars:
        raise InputError(
            f"Your message is {len(text):,} characters long; the limit is {max_chars:,}. "
            "Shorten it or split it into several messages."
        )
    return text


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
    ) -> None:
        if not roster:
            raise PersonaError("No persona is switched on: turn at least one persona on to chat.")
        self.backend = backend
        self.roster = roster
        self.director = director or make_director(mode, backend, max_speakers, allow_repeat, min_speakers)
        self.speaker = Speaker(backend, speaker_params, style=speaker_style, use_adapters=use_adapters)
        self.max_message_chars = max_message_chars
        self.safety = safety or default_detector()
        self.safety_judge = make_gray_zone_judge(backend)  # None unless enabled for an openai/vllm backend

    def persona(self, name: str) -> Persona:
        for p in self.roster:
            if p.name == name:
                return p
        raise PersonaError(f"{name!r} is not an active persona ({', '.join(p.name for p in self.roster)}).")

    def _start(self, dialogue: Dialogue, user_text: str | None, session_id: str = "",
               record: bool = True) -> tuple[str, CrisisResult]:
        """Append (or reuse, for regenerate) the user turn; returns its text and the crisis check's
        decision on it, made with the earlier user turns as context (logged when `record`)."""
        if user_text is None:  # regenerate: drop this round's persona turns, keep the user turn
            i = dialogue.last_user_index()
            if i < 0:
                raise InputError("There is no user message to regenerate a reply for.")
            del dialogue.turns[i + 1 :]
            text = dialogue.turns[i].text
        else:
            text = validate_message(user_text, self.max_message_chars)
            dialogue.add(Turn(USER, text))
        i = dialogue.last_user_index()
        history = [t.text for t in dialogue.turns[:i] if t.is_user]
        return text, self.safety.check(text, history, judge=self.safety_judge, session_id=session_id, record=record)

    @staticmethod
    def _crisis_turn(result: CrisisResult) -> Turn:
        return Turn(CRISIS_SPEAKER, CRISIS_REPLY, meta={"crisis": True, "matched": result.matched, "tier": result.tier,
                                                        "score": result.score, "layer": result.layer})

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
        text, safety = self._start(dialogue, user_text, session_id)
        if safety.is_crisis:
            yield CrisisEvent(dialogue.add(self._crisis_turn(safety)))
            return
        forced = list(forced or []) or find_mentions(text, self.roster)
        for step in range(len(self.roster) + len(forced) + 1):
            if stop is not None and stop.is_set():
                return
            state = DirectorState(dialogue, self.roster, seed, forced)
            opens_concern = step == 0 and safety.is_concern  # Anchor first asks about safety
            decision = Decision(concern_directive(self.roster), "safety") if opens_concern else self.director.decide(state)
            yield DirectiveEvent(decision)
            if decision.directive is None:
                return
            persona = self.persona(decision.directive.speaker)
            reply = ""
            stopped = False
            guard = self.safety.guard(session_id, risky=safety.tier != "none")  # only checked sentences reach the user
            for reply in guard.stream(self.speaker.stream(persona, self.roster, dialogue, decision.directive, seed=seed * 101 + step)):
                yield TokenEvent(persona.name, reply)
                if stop is not None and stop.is_set():
                    stopped = True
                    break
            meta = {"source": decision.source, "stopped": stopped, "safety": "replaced" if guard.replaced else safety.tier}
            if opens_concern:
                reply = with_help_note(reply)
            turn = dialogue.add(Turn(persona.name, reply or "…", decision.directive, meta))
            yield TurnEvent(turn)
            if stopped:
                return

    def run(self, dialogue: Dialogue, user_text: str | None, *, seed: int = 0, forced: list[str] | None = None) -> list[Turn]:
        """Non-streaming `respond`: returns the turns added after the user message."""
        return [e.turn for e in self.respond(dialogue, user_text, seed=seed, forced=forced) if isinstance(e, (TurnEvent, CrisisEvent))]

    def add_user_message(self, dialogue: Dialogue, text: str) -> Turn | None:
        """Append a user message (from a simulated user); returns the fixed safety turn, already
        appended, when the crisis check fires, else None."""
        _, result = self._start(dialogue, text, record=False)  # simulated users stay out of the safety log
        return dialogue.add(self._crisis_turn(result)) if result.is_crisis else None

    def step_batch(self, dialogues: list[Dialogue], seeds: list[int], decisions: list[Decision | None] | None = None,
                   step: int = 0) -> list[tuple[Decision, Turn | None]]:
        """One director step for each dialogue, then the chosen speakers' replies in batched calls (one per
        adapter). `decisions[i]`, when given, replaces the director for dialogue i (a Stage-2 directive
        under evaluation); it is still checked against the roster and the no-repeat rule. Returns
        (decision, the new turn or None when the director yields) per dialogue."""
        overrides = decisions or [None] * len(dialogues)
        ask = [i for i, d in enumerate(overrides) if d is None]
        states = [DirectorState(dialogues[i], self.roster, seeds[i], find_mentions(dialogues[i].last_user_text(), self.roster))
                  for i in range(len(dialogues))]
        out: list[Decision] = [d if d is not None else Decision(None, "") for d in overrides]
        for i, dec in zip(ask, self.director.decide_batch([states[i] for i in ask]) if ask else []):
            out[i] = dec
        for i, dec in enumerate(overrides):
            if dec is not None:
                out[i] = self.director.check(states[i], dec)
        speaking = [(i, dec) for i, dec in enumerate(out) if dec.directive is not None]
        items = [(self.persona(dec.directive.speaker), self.roster, dialogues[i], dec.directive) for i, dec in speaking]  # type: ignore[union-attr]
        replies = self.speaker.reply_batch(items, seed=(seeds[0] if seeds else 0) * 101 + step) if items else []
        turns: list[Turn | None] = [None] * len(dialogues)
        for (i, dec), reply in zip(speaking, replies):
            turns[i] = dialogues[i].add(Turn(dec.directive.speaker, reply or "…", dec.directive, {"source": dec.source}))  # type: ignore[union-attr]
        return list(zip(out, turns))

    def respond_batch(self, dialogues: list[Dialogue], user_texts: list[str | None], seeds: list[int]) -> list[list[Turn]]:
        """Step many dialogues in lockstep, batching the director and each adapter's speaker calls."""
        added: list[list[Turn]] = [[] for _ in dialogues]
        live: list[int] = []
        for i, (d, text) in enumerate(zip(dialogues, user_texts)):
            _, result = self._start(d, text, record=False)  # rollouts and evaluation stay out of the safety log
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
