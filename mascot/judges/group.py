"""The group judge (Stage-2 reward and the director evaluation): scores a block of N turns of group
conversation on the paper's collective criteria, 1-5 each, reported 0-100:

- fidelity     (Fidelity): each persona sounds like itself;
- originality  (Originality & Specificity): each turn adds something the group has not said;
- relevance    (Relevance & Coherence): turns answer the user's latest message and hang together;
- engagement   (Engagement & Contribution): the group takes up what the user newly said, and the floor
               is shared rather than monopolised;
- consistency  (global state consistency): the group does not contradict itself or re-open points it
               already settled.

Two kinds, like the Stage-1 judge: `offline` (measured signals, below) and `llm` (an OpenAI-compatible
model with the rubric in `mascot/judges/group_llm.py`, cached and retried).

Offline signals (each documented in docs/stage2.md; embeddings are the bundled all-MiniLM-L6-v2):
  persona fit   cos(turn, own persona profile) - max cos(turn, another persona's profile)
  novelty       1 - max cos(turn, earlier group turns), averaged with the share of new content words
  relevance     0.7 cos(turn, the user's latest message) + 0.3 cos(turn, the situation)
  uptake        max(share of the user's new content words echoed by the turn, cos(turn, the user's message))
                for the group's turns after each user message (best turn of that round)
  balance       distinct speakers / min(persona turns, roster size), minus 0.25 per back-to-back repeat
  contradiction highest similarity between two group turns of opposite polarity (one negated, one not,
                sharing content words), and re-asked questions (a question close to an earlier one)
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mascot.errors import unknown_name
from mascot.group.dialogue import Dialogue, Turn
from mascot.group.personas import Persona
from mascot.judges.base import Verdict, check_scores
from mascot.judges.embedding import Embedder, shared_embedder
from mascot.judges.lexicon import content_words, words

GROUP_CRITERIA: dict[str, str] = {
    "fidelity": "Fidelity",
    "originality": "Originality & Specificity",
    "relevance": "Relevance & Coherence",
    "engagement": "Engagement & Contribution",
    "consistency": "Global state consistency",
}
DEFAULT_BLOCK = 4
NEGATIONS = frozenset("not no never don't dont doesn't didn't isn't aren't wasn't shouldn't can't cannot won't "
                      "wouldn't mustn't stop avoid nothing nobody".split())
# Calibration ranges (signal -> 1..5), measured on the contrast blocks and SmolLM2 rollouts (docs/stage2.md).
GROUP_CAL = {"fit": (-0.06, 0.10), "novelty": (0.15, 0.65), "relevance": (0.05, 0.50), "uptake": (0.10, 0.55),
             "contradiction": (0.35, 0.70)}


def _lin(x: float, key: str) -> float:
    lo, hi = GROUP_CAL[key]
    return float(min(1.0, max(0.0, (x - lo) / (hi - lo))))


def to_100(score: float) -> float:
    """paper.md §7.16: (mean 1-5 score - 1) / 4 x 100."""
    return (score - 1.0) / 4.0 * 100.0


@dataclass
class GroupBlock:
    """N consecutive turns (`turns`, user turns included) after `context`, by a group of `roster`."""

    context: Dialogue
    turns: list[Turn]
    roster: list[Persona]
    setting: str = "emotional-support"

    def persona_turns(self) -> list[Turn]:
        return [t for t in self.turns if not t.is_user]


@dataclass
class GroupVerdict(Verdict):
    """A group judge's 1-5 scores on GROUP_CRITERIA (or why there are none)."""

    criteria: ClassVar[dict[str, str]] = GROUP_CRITERIA

    @property
    def score_100(self) -> float:
        return to_100(self.aggregate)

    @classmethod
    def invalid(cls, error: str, raw: str = "") -> GroupVerdict:
        return cls(None, False, error, raw)


def check_group_scores(scores: dict[str, float]) -> dict[str, float]:
    """`check_scores` over the group criteria."""
    return check_scores(scores, GROUP_CRITERIA)


class GroupJudge(ABC):
    """Scores blocks; never raises on a bad answer (invalid GroupVerdict instead)."""

    name = "base"

    @abstractmethod
    def score_blocks(self, blocks: list[GroupBlock]) -> list[GroupVerdict]:
        """One verdict per block, in order."""

    def describe(self) -> str:
        return self.name


def _stem(w: str) -> str:
    return w[:5]


def _negated(text: str) -> bool:
    toks = words(text)
    return any(w in NEGATIONS or w.endswith("n't") for w in toks)


class OfflineGroupJudge(GroupJudge):
    """Measured-signal group judge (module docstring)."""

    name = "offline"

    def __init__(self, embedder: Embedder | None = None) -> None:
        from mascot.judges.offline import OfflineJudge

        self.embedder = embedder or shared_embedder()
        self._persona_judge = OfflineJudge(self.embedder)  # its cached persona profiles (persona fit)

    def describe(self) -> str:
        return "offline group judge (all-MiniLM-L6-v2 signals: fit, novelty, relevance, uptake, balance, contradiction)"

    def profile(self, p: Persona) -> np.ndarray:
        return self._persona_judge.profile(p)

    def score_blocks(self, blocks: list[GroupBlock]) -> list[GroupVerdict]:
        texts = [t.text for b in blocks for t in (*b.context.turns, *b.turns)] + [b.context.situation for b in blocks]
        self.embedder.encode([t for t in texts if t])
        out = []
        for b in blocks:
            try:
                out.append(self._score(b))
            except Exception as exc:  # never crash a run
                out.append(GroupVerdict.invalid(f"offline group judge failed: {exc}"))
        return out

    def signals(self, block: GroupBlock) -> dict[str, float]:
        """The raw measurements behind one verdict (also returned in the verdict's meta)."""
        roster = {p.name: p for p in block.roster}
        history: list[Turn] = list(block.context.turns)
        fits, novs, rels, contra, reopen = [], [], [], 0.0, 0.0
        uptakes: dict[int, float] = {}
        seen_user: set[str] = {_stem(w) for t in history if t.is_user for w in content_words(t.text)}
        situation = block.context.situation
        s_vec = self.embedder.encode([situation])[0] if situation else None
        last_user_i = -1
        new_words: dict[int, set[str]] = {}
        for i, t in enumerate(block.context.turns):
            if t.is_user:
                last_user_i = i
        if last_user_i >= 0:  # the user's latest message before the block counts as "newly said"
            earlier = {_stem(w) for t in block.context.turns[:last_user_i] if t.is_user for w in content_words(t.text)}
            new_words[last_user_i] = {_stem(w) for w in content_words(block.context.turns[last_user_i].text)} - earlier
        user_text = block.context.turns[last_user_i].text if last_user_i >= 0 else ""
        for t in block.turns:
            if t.is_user:
                last_user_i = len(history)
                new_words[last_user_i] = {_stem(w) for w in content_words(t.text)} - seen_user
                seen_user |= {_stem(w) for w in content_words(t.text)}
                user_text = t.text
                history.append(t)
                continue
            text = t.text.strip().strip("…").strip()
            group_prev = [h.text for h in history if not h.is_user and h.text.strip()]
            if not text:
                fits.append(0.0), novs.append(0.0), rels.append(0.0)
                uptakes.setdefault(last_user_i, 0.0)
                history.append(t)
                continue
            v = self.embedder.encode([text])[0]
            p = roster.get(t.speaker)
            if p is not None and len(roster) > 1:
                own = float(v @ self.profile(p))
                other = max(float(v @ self.profile(q)) for q in roster.values() if q.name != p.name)
                fits.append(_lin(own - other, "fit"))
            else:
                fits.append(0.5)
            prev_vecs = self.embedder.encode(group_prev) if group_prev else None
            max_prev = float((prev_vecs @ v).max()) if prev_vecs is not None else 0.0
            seen = {_stem(w) for g in group_prev for w in content_words(g)}
            cw = {_stem(w) for w in content_words(text)}
            new_share = len(cw - seen) / len(cw) if cw else 0.0
            novs.append(0.5 * _lin(1.0 - max_prev, "novelty") + 0.5 * new_share)
            u = float(v @ self.embedder.encode([user_text])[0]) if user_text else 0.0
            s = float(v @ s_vec) if s_vec is not None else u
            rels.append(_lin(0.7 * u + 0.3 * s, "relevance"))
            nw = new_words.get(last_user_i, set())
            echo = len(nw & cw) / min(len(nw), 4) if nw else 0.0
            uptakes[last_user_i] = max(uptakes.get(last_user_i, 0.0), max(min(1.0, echo), _lin(u, "uptake")))
            if prev_vecs is not None:
                neg = _negated(text)
                for g, sim in zip(group_prev, (prev_vecs @ v).tolist()):
                    shares = len(cw & {_stem(w) for w in content_words(g)}) > 0
                    if shares and _negated(g) != neg:
                        contra = max(contra, _lin(sim, "contradiction"))
                    if text.rstrip().endswith("?") and g.rstrip().endswith("?") and sim > 0.8:
                        reopen = max(reopen, (sim - 0.8) / 0.2)
            history.append(t)
        speakers = [t.speaker for t in block.persona_turns()]
        if speakers:
            repeats = sum(a == b for a, b in zip(speakers, speakers[1:]))
            balance = len(set(speakers)) / min(len(speakers), max(1, len(roster))) - 0.25 * repeats
        else:
            balance = 0.0
        mean = lambda xs: float(sum(xs) / len(xs)) if xs else 0.0  # noqa: E731
        return {"fit": mean(fits), "novelty": mean(novs), "relevance": mean(rels), "uptake": mean(list(uptakes.values())),
                "balance": max(0.0, balance), "contradiction": contra, "reopen": reopen,
                "persona_turns": float(len(speakers))}

    def _score(self, block: GroupBlock) -> GroupVerdict:
        if not block.persona_turns():
            return GroupVerdict.invalid("the block has no persona turn to judge")
        g = self.signals(block)
        conflict = max(g["contradiction"], g["reopen"])
        s = lambda x: round(1.0 + 4.0 * min(1.0, max(0.0, x)), 3)  # noqa: E731
        scores = {
            "fidelity": s(g["fit"]),
            "originality": s(g["novelty"]),
            "relevance": s(g["relevance"] - 0.5 * conflict),
            "engagement": s(0.5 * g["uptake"] + 0.5 * g["balance"]),
            "consistency": s(1.0 - conflict),
        }
        return GroupVerdict(scores, True, raw=json.dumps({k: round(v, 4) for k, v in g.items()}), meta={"signals": g})


GROUP_JUDGES: dict[str, str] = {
    "offline": "mascot.judges.group:OfflineGroupJudge",
    "llm": "mascot.judges.group_llm:LLMGroupJudge",
}


def load_group_judge(name: str, **kwargs: object) -> GroupJudge:
    """Build a group judge by name (`offline` | `llm`)."""
    import importlib

    if name not in GROUP_JUDGES:
        raise unknown_name("group judge", name, list(GROUP_JUDGES))
    module, cls = GROUP_JUDGES[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


def blocks_from_dialogue(dialogue: Dialogue, start: int, roster: list[Persona], n: int = DEFAULT_BLOCK,
                         setting: str = "emotional-support") -> list[GroupBlock]:
    """Consecutive N-turn blocks of a dialogue from turn index `start` (the last may be shorter)."""
    ctx_turns = list(dialogue.turns[:start])
    out = []
    for i in range(start, len(dialogue.turns), n):
        block = dialogue.turns[i : i + n]
        out.append(GroupBlock(Dialogue(turns=list(ctx_turns), situation=dialogue.situation, emotion=dialogue.emotion),
                              list(block), roster, setting))
        ctx_turns += block
    return [b for b in out if b.persona_turns()]


__all__ = ["DEFAULT_BLOCK", "GROUP_CRITERIA", "GROUP_JUDGES", "GroupBlock", "GroupJudge", "GroupVerdict",
           "OfflineGroupJudge", "blocks_from_dialogue", "check_group_scores", "load_group_judge", "to_100"]

