"""Simulated users for Stage-2 rollouts and the director evaluation, behind one interface.

- `llm` (`LLMSimUser`): a prompted user seeded with the scenario (situation and emotion, or the meeting
  context) and an optional personality profile (`profiles.yaml`: the paper's 10 Big Five settings and
  16 MBTI types). Rules from tau-bench and RLVER: 1-3 sentences, reveal information gradually, stay in
  character, never take the companions' role, and end with the stop marker `[END]` when done.
- `replay` (`ReplaySimUser`): the seeker's real next turns from a multi-turn script (the bundled
  seeker scripts written for this project, or ESConv seeker turns).

Simulated users are keyed by rollout id: `start(rollout_id, script)` once, then `reply_batch(ids, dialogues)`
for whichever rollouts are still live, so a dialogue that ends never shifts another's user.

    user = load_simuser("replay")
    user.start("r0", script)
    turn = user.reply_batch(["r0"], [dialogue])[0]   # SimUserTurn(text, done, source)
"""

from __future__ import annotations

import functools
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mascot.backends.base import Backend, GenerationParams, Messages
from mascot.errors import ConfigError, unknown_name
from mascot.group.dialogue import Dialogue

log = logging.getLogger(__name__)

STOP_MARKER = "[END]"
PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
MAX_SENTENCES = 3


@dataclass
class SeekerScript:
    """A user's side of one conversation: the scenario plus the seeker's turns in order."""

    id: str
    situation: str
    turns: list[str]
    emotion: str = ""
    split: str = "train"
    setting: str = "emotional-support"
    source: str = "mascot-seeker-scripts"
    meta: dict[str, Any] = field(default_factory=dict)

    def opening_dialogue(self) -> Dialogue:
        """The dialogue after the seeker's first message (what the group answers first)."""
        from mascot.group.dialogue import USER, Turn

        return Dialogue(turns=[Turn(USER, self.turns[0])], situation=self.situation, emotion=self.emotion)


@dataclass
class SimUserTurn:
    """The simulated user's next message; `done` means the user ended the conversation."""

    text: str
    done: bool = False
    source: str = ""
    note: str = ""


# ------------------------------------------------------------------- profiles
@functools.lru_cache(maxsize=1)
def _profile_table() -> dict[str, str]:
    data = yaml.safe_load(PROFILES_FILE.read_text(encoding="utf-8"))
    table = {f"big5-{k}": " ".join(v.split()) for k, v in data["big5"].items()}
    table.update({f"mbti-{k}": " ".join(v.split()) for k, v in data["mbti"].items()})
    return table


def list_profiles() -> list[str]:
    """Every profile name: 10 `big5-<trait>-<high|low>` and 16 `mbti-<TYPE>`."""
    return list(_profile_table())


def profile_fragment(name: str | None) -> str:
    """The prompt fragment of a profile ("" for none); unknown names list the valid ones."""
    if not name:
        return ""
    table = _profile_table()
    key = name if name in table else (f"mbti-{name.upper()}" if f"mbti-{name.upper()}" in table else name)
    if key not in table:
        raise unknown_name("simulated-user profile", name, list(table))
    return table[key]


# ------------------------------------------------------------------- interface
class SimulatedUser(ABC):
    """A user simulator holding one script per rollout id."""

    kind = "base"

    def __init__(self) -> None:
        self.scripts: dict[str, SeekerScript] = {}

    def start(self, rollout_id: str, script: SeekerScript) -> None:
        self.scripts[rollout_id] = script

    def forget(self, rollout_id: str) -> None:
        self.scripts.pop(rollout_id, None)

    def script(self, rollout_id: str) -> SeekerScript:
        if rollout_id not in self.scripts:
            raise ConfigError(f"Simulated user: rollout {rollout_id!r} was never started (call start() first).")
        return self.scripts[rollout_id]

    @abstractmethod
    def reply_batch(self, rollout_ids: Sequence[str], dialogues: Sequence[Dialogue]) -> list[SimUserTurn]:
        """The next user message for each rollout (batched where possible)."""


def user_turns(dialogue: Dialogue) -> int:
    return sum(1 for t in dialogue.turns if t.is_user)


class ReplaySimUser(SimulatedUser):
    """Replays the seeker's real next turn: the k-th user message of a dialogue is script turn k, so the
    position comes from the dialogue itself and survives other rollouts ending."""

    kind = "replay"

    def reply_batch(self, rollout_ids: Sequence[str], dialogues: Sequence[Dialogue]) -> list[SimUserTurn]:
        out = []
        for rid, d in zip(rollout_ids, dialogues):
            script = self.script(rid)
            k = user_turns(d)
            if k >= len(script.turns):
                out.append(SimUserTurn("", done=True, source="replay", note="script finished"))
            else:
                out.append(SimUserTurn(script.turns[k], source="replay"))
        return out


RULES = (
    "Rules: write only your own next message as the user, 1-3 short sentences, in the first person. "
    "Reveal your situation gradually: do not tell everything at once; answer what you were asked and add one "
    "new detail at a time. Stay in character and never say you are an AI or a simulation. Never act as a "
    "companion, counsellor or assistant: do not give advice to yourself, do not answer for the companions "
    f"and do not write their names as tags. When your need has been met or you want to stop, end your message "
    f"with {STOP_MARKER}."
)


def simuser_messages(script: SeekerScript, dialogue: Dialogue, profile: str | None = None, max_turns: int = 10) -> Messages:
    """The simulated user's chat: scenario, optional profile fragment, rules; the conversation with the
    roles flipped (the companions' lines are shown to the model as the other party)."""
    if script.setting == "meeting":
        scene = f"You are a participant in a meeting. Meeting context: {script.situation}"
    else:
        feeling = f" You feel {script.emotion}." if script.emotion else ""
        scene = f"You are a person talking to a small group of supportive companions about this situation: {script.situation}{feeling}"
    fragment = profile_fragment(profile)
    system = "\n".join(x for x in (scene, fragment, RULES) if x)
    history = dialogue.transcript(max_turns=max_turns, user_label="You")
    user = f"Conversation so far:\n{history}\n\nWrite your next message as the user."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def clean_user_text(text: str, companions: Sequence[str] = ()) -> tuple[str, bool]:
    """One user message from raw model output: cut at another speaker's tag, drop a leading `You:`/`User:`,
    keep at most 3 sentences; returns (text, whether the stop marker was given)."""
    done = STOP_MARKER.lower() in text.lower()
    text = re.split(re.escape(STOP_MARKER), text, flags=re.I)[0]
    text = re.sub(r"^\s*\**(you|user|me|seeker)\**\s*:\s*", "", text.strip(), flags=re.I)
    names = [re.escape(n) for n in (*companions, "Director", "Assistant", "Companion")]
    m = re.search(rf"(?:^|\n)\s*\**(?:{'|'.join(names)})\**\s*:", text, flags=re.I) if names else None
    if m:
        text = text[: m.start()]
    text = re.sub(r"\s+", " ", text).strip().strip('"').strip()
    sentences = re.findall(r"[^.!?…]+[.!?…]*\s*", text)
    if len(sentences) > MAX_SENTENCES:
        text = "".join(sentences[:MAX_SENTENCES]).strip()
    return text, done


class LLMSimUser(SimulatedUser):
    """A prompted simulated user on any backend (the base model, no adapter). An empty reply is retried
    once with another seed; a second empty reply ends that rollout (logged)."""

    kind = "llm"

    def __init__(self, backend: Backend, profile: str | None = None, params: GenerationParams | None = None,
                 companions: Sequence[str] = (), adapter: str | None = None, seed: int = 0) -> None:
        super().__init__()
        profile_fragment(profile)  # fail early on an unknown profile
        self.backend, self.profile, self.adapter, self.seed = backend, profile, adapter, seed
        self.companions = list(companions)
        self.params = params or GenerationParams(max_new_tokens=60, temperature=0.8, top_p=0.95, stop=("\n\n",))
        self.profiles: dict[str, str | None] = {}
        self.calls = 0

    def start(self, rollout_id: str, script: SeekerScript, profile: str | None = None) -> None:
        super().start(rollout_id, script)
        profile_fragment(profile)
        self.profiles[rollout_id] = profile or self.profile

    def messages(self, rollout_id: str, dialogue: Dialogue) -> Messages:
        return simuser_messages(self.script(rollout_id), dialogue, self.profiles.get(rollout_id, self.profile))

    def reply_batch(self, rollout_ids: Sequence[str], dialogues: Sequence[Dialogue]) -> list[SimUserTurn]:
        out: list[SimUserTurn | None] = [None] * len(rollout_ids)
        todo = list(range(len(rollout_ids)))
        for attempt in range(2):
            if not todo:
                break
            chats = [self.messages(rollout_ids[i], dialogues[i]) for i in todo]
            self.calls += 1
            params = self.params.with_(seed=self.seed * 1009 + self.calls * 17 + attempt)
            results = self.backend.generate(chats, params, adapter=self.adapter)
            still = []
            for i, c in zip(todo, results):
                text, done = clean_user_text(c.text, self.companions)
                if text or done:
                    out[i] = SimUserTurn(text, done=done or not text, source="llm")
                else:
                    still.append(i)
            todo = still
        for i in todo:
            log.warning("simulated user returned nothing twice for rollout %s; ending that dialogue", rollout_ids[i])
            out[i] = SimUserTurn("", done=True, source="llm", note="empty reply twice: dialogue ended")
        return [o for o in out if o is not None]


SIMUSERS = ("llm", "replay")


def load_simuser(kind: str, backend: Backend | None = None, **kwargs: Any) -> SimulatedUser:
    """Build a simulated user by kind (`llm` needs a backend)."""
    if kind not in SIMUSERS:
        raise unknown_name("simulated-user kind", kind, SIMUSERS)
    if kind == "replay":
        return ReplaySimUser()
    if backend is None:
        raise ConfigError("The 'llm' simulated user needs a backend to generate with.")
    return LLMSimUser(backend, **kwargs)


from mascot.simusers.scripts import load_scripts  # noqa: E402  (re-exported)

__all__ = ["LLMSimUser", "ReplaySimUser", "SIMUSERS", "STOP_MARKER", "SeekerScript", "SimUserTurn", "SimulatedUser",
           "clean_user_text", "list_profiles", "load_scripts", "load_simuser", "profile_fragment", "simuser_messages"]
