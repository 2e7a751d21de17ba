"""Simulated conversations through the live chat's GroupChat batch path: the director (or a given
first directive) picks speakers, the frozen speakers reply, and a simulated user answers when the
group yields. Used by Stage-2 training (dialogue states and N-turn reward rollouts) and the director
evaluation. Every rollout has its own id, and the simulated user is keyed by that id.

    rollouts = [Rollout.from_script(f"r{i}", s, seed=i) for i, s in enumerate(scripts)]
    roll_forward(chat, rollouts, user, n_turns=4)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mascot.group.chat import GroupChat
from mascot.group.dialogue import Dialogue, Turn
from mascot.group.director import Decision
from mascot.simusers import SeekerScript, SimulatedUser

log = logging.getLogger(__name__)


@dataclass
class Rollout:
    """One simulated conversation from `start` (the index of its first new turn)."""

    id: str
    script: SeekerScript
    dialogue: Dialogue
    seed: int = 0
    first: Decision | None = None  # a directive to apply at the first director step (Stage-2 sampling)
    start: int = 0
    awaiting_user: bool = False
    done: bool = False
    decisions: list[Decision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.start:
            self.start = len(self.dialogue.turns)

    @classmethod
    def from_script(cls, rid: str, script: SeekerScript, seed: int = 0) -> Rollout:
        """A rollout that starts right after the seeker's opening message."""
        return cls(rid, script, script.opening_dialogue(), seed)

    @property
    def new_turns(self) -> list[Turn]:
        return self.dialogue.turns[self.start :]


def roll_forward(chat: GroupChat, rollouts: list[Rollout], user: SimulatedUser, n_turns: int | None = None,
                 user_turns: int | None = None, max_steps: int = 64) -> list[Rollout]:
    """Advance every rollout, batched, until it has `n_turns` new turns (user turns included), or the user has
    sent `user_turns` more messages, or the simulated user ends the conversation."""
    if n_turns is None and user_turns is None:
        raise ValueError("roll_forward needs n_turns or user_turns.")
    for r in rollouts:
        if r.id not in user.scripts:
            user.start(r.id, r.script)
    sent = {r.id: 0 for r in rollouts}

    def finished(r: Rollout) -> bool:
        return r.done or (n_turns is not None and len(r.new_turns) >= n_turns)

    for step in range(max_steps):
        live = [r for r in rollouts if not finished(r)]
        if not live:
            break
        personas = [r for r in live if not r.awaiting_user]
        if personas:
            overrides = [r.first if not r.decisions else None for r in personas]
            results = chat.step_batch([r.dialogue for r in personas], [r.seed for r in personas], overrides, step=step)
            for r, (decision, turn) in zip(personas, results):
                r.decisions.append(decision)
                if turn is None:
                    r.awaiting_user = True
        waiting = [r for r in live if r.awaiting_user and not finished(r)]
        if user_turns is not None:
            for r in waiting:
                if sent[r.id] >= user_turns:
                    r.done = True
            waiting = [r for r in waiting if not r.done]
        if waiting:
            replies = user.reply_batch([r.id for r in waiting], [r.dialogue for r in waiting])
            for r, reply in zip(waiting, replies):
                if reply.text:
                    crisis = chat.add_user_message(r.dialogue, reply.text)
                    sent[r.id] += 1
                    r.awaiting_user = crisis is not None  # after the fixed safety reply the floor is the user's
                if reply.done or not reply.text:
                    r.done = True
                    r.notes.append(reply.note or "the simulated user ended the conversation")
    for r in rollouts:
        if not finished(r) and not r.done:
            log.warning("rollout %s stopped after %d steps without finishing", r.id, max_steps)
    return rollouts
