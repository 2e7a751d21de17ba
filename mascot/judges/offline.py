"""The offline judge: the five criteria from measurable signals, no server needed.

It approximates the LLM judge and is not a substitute for it. Each criterion is a documented,
monotone mapping of a few signals computed with the bundled all-MiniLM-L6-v2 embeddings and
simple text features (docs/evaluation.md has the table and its limits):

- consistency: how much closer the reply is to this persona's profile (role, goal, behaviours,
  style, example lines) than to the closest competitor: the other personas and a generic
  assistant profile. A generic reply that fits everyone gets a margin near or below 0 and scores low.
- relevance: similarity to the user's last message and to the situation / meeting excerpt.
- contribution: novelty against what the group already said (embedding and new content words),
  weighted by how much content the reply carries, and capped at relevance + 1 (new but
  off-topic is not a contribution).
- emotion: feeling words and intensity markers plus similarity to expressive anchor lines.
- empathy: similarity to validating/supportive anchor lines, addressing the user, naming a
  feeling, minus dismissive phrases.
- mood match: a reply that celebrates ("How wonderful!", "congratulations") a message reporting loss,
  failure or distress (a negative emotion label, or a distress word when there is none; `mascot.judges.mood`)
  loses 2 points of Emotion and Empathy and 1 of Relevance (`mood_mismatch`).
Format checks (meta-talk, another speaker's tag, too short/long, degenerate repetition) cap scores.

    >>> judge = OfflineJudge(); judge.score_batch(items)[0].scores
"""

from __future__ import annotations

import json
import re

import numpy as np

from mascot.group.cleaning import has_meta_talk
from mascot.group.dialogue import Dialogue
from mascot.group.personas import Persona
from mascot.judges.base import CRITERIA, Judge, JudgeItem, Verdict
from mascot.judges.embedding import Embedder, shared_embedder
from mascot.judges.lexicon import (
    AFFECT_WORDS,
    DISMISSIVE,
    EMOTION_ANCHORS,
    EMPATHY_ANCHORS,
    GENERIC_ASSISTANT,
    INTENSIFIERS,
    YOU_WORDS,
    content_words,
    words,
)
from mascot.judges.mood import mood_mismatch

MIN_WORDS, MAX_WORDS = 4, 150
# The generic-assistant profile competes with a handicap: warm validation is legitimately close to
# generic sympathy, so a reply loses Consistency only when it is nearer the generic profile than
# to its own persona by more than this slack.
GENERIC_SLACK = 0.10  # format bounds (paper.md §7.7 uses 15–150 for the format reward)
EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF]")

# Calibration ranges: the raw signal value that maps to a score of 1 (lo) and of 5 (hi), linear
# and clipped in between. Measured on the packs' example lines and SmolLM2/Qwen replies (see docs).
CAL = {
    "margin": (-0.06, 0.10),     # own-persona similarity minus the best other persona's
    "own_sim": (0.10, 0.50),     # single-persona roster: plain similarity to the profile
    "relevance": (0.05, 0.50),   # weighted similarity to last user message and situation
    "novelty": (0.10, 0.60),     # 1 - max similarity to the group's earlier turns
    "affect_density": (0.0, 0.12),
    "anchor_emotion": (0.10, 0.50),
    "anchor_empathy": (0.10, 0.55),
    "you_ratio": (0.0, 0.08),
    "info_words": (2, 12),       # content words; saturates at 12
}


def lin01(x: float, key: str) -> float:
    """Map a raw signal to [0, 1] with its calibration range (monotone, clipped)."""
    lo, hi = CAL[key]
    return float(min(1.0, max(0.0, (x - lo) / (hi - lo))))


def to_score(x01: float) -> float:
    return round(1.0 + 4.0 * min(1.0, max(0.0, x01)), 2)


def persona_profile_texts(p: Persona) -> list[str]:
    """What a persona 'sounds like': role and goal, behaviours, style and example lines.
    The `avoid` list is left out on purpose: it describes what the persona is NOT."""
    return [f"{p.role}: {p.goal}", *p.behaviours, p.style, *p.examples]


def other_speaker_tag(text: str, item: JudgeItem) -> bool:
    """True if the reply contains a line spoken as someone else (another persona or the user)."""
    names = [n for p in item.roster if p.name != item.persona.name for n in (p.name, *p.aliases)] + ["User", "Director"]
    alts = "|".join(re.escape(n) for n in names if n)
    return bool(re.search(rf"(?:^|\n|[.!?]\s)\s*\**(?:{alts})\**\s*:", text, flags=re.I))


def group_turns(dialogue: Dialogue) -> list[str]:
    """What the group already said: every persona turn in the context (not the user's)."""
    return [t.text for t in dialogue.turns if not t.is_user and t.text.strip()]


class OfflineJudge(Judge):
    """Signals-based approximation of the LLM judge (see the module docstring)."""

    name = "offline"

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = embedder or shared_embedder()
        self._profiles: dict[str, np.ndarray] = {}

    def describe(self) -> str:
        return "offline (all-MiniLM-L6-v2 signals; approximates the LLM judge)"

    def profile(self, p: Persona) -> np.ndarray:
        key = json.dumps(persona_profile_texts(p))
        if key not in self._profiles:
            self._profiles[key] = self.embedder.mean_vector(persona_profile_texts(p))
        return self._profiles[key]

    def generic_profile(self) -> np.ndarray:
        if "__generic__" not in self._profiles:
            self._profiles["__generic__"] = self.embedder.mean_vector(list(GENERIC_ASSISTANT))
        return self._profiles["__generic__"]

    def score_batch(self, items: list[JudgeItem]) -> list[Verdict]:
        # Encode every text the batch needs in one call; the embedder caches repeats.
        texts = [t for it in items for t in (it.response, it.dialogue.last_user_text(), it.dialogue.situation, *group_turns(it.dialogue))]
        texts += list(EMOTION_ANCHORS) + list(EMPATHY_ANCHORS)
        self.embedder.encode(texts)
        emo_anchors = self.embedder.encode(list(EMOTION_ANCHORS))
        emp_anchors = self.embedder.encode(list(EMPATHY_ANCHORS))
        out = []
        for it in items:
            try:
                out.append(self._score(it, emo_anchors, emp_anchors))
            except Exception as exc:  # a judge never crashes a run: record it as invalid
                out.append(Verdict.invalid(f"offline judge failed: {exc}"))
        return out

    def signals(self, item: JudgeItem, emo_anchors: np.ndarray, emp_anchors: np.ndarray) -> dict[str, float]:
        """The raw measurements behind one verdict (returned in Verdict.raw for inspection)."""
        text = item.response.strip()
        toks, content = words(text), content_words(text)
        resp = self.embedder.encode([text])[0]
        roster = item.roster if any(p.name == item.persona.name for p in item.roster) else [item.persona, *item.roster]
        sims = {p.name: float(resp @ self.profile(p)) for p in roster}
        own = sims[item.persona.name]
        others = [v for k, v in sims.items() if k != item.persona.name]
        generic = float(resp @ self.generic_profile())
        user, situation = item.dialogue.last_user_text(), item.dialogue.situation
        u = float(resp @ self.embedder.encode([user])[0]) if user else 0.0
        s = float(resp @ self.embedder.encode([situation])[0]) if situation else u
        w_user = 0.5 if item.setting == "meeting" else 0.7  # meetings: the excerpt matters as much as the query
        prior = group_turns(item.dialogue)
        prior_vecs = self.embedder.encode(prior) if prior else np.zeros((0, resp.shape[0]), np.float32)
        max_prior = float((prior_vecs @ resp).max()) if len(prior) else 0.0
        seen = {w for t in prior for w in content_words(t)}
        return {
            "n_words": len(toks),
            "own_sim": own,
            "generic_sim": generic,
            "margin": own - max([*others, generic - GENERIC_SLACK]) if others else float("nan"),
            "relevance": w_user * u + (1 - w_user) * s,
            "novelty": 1.0 - max_prior,
            "new_word_share": (len(set(content) - seen) / len(set(content))) if content else 0.0,
            "info_words": float(len(set(content))),
            "affect_density": sum(w in AFFECT_WORDS for w in toks) / max(1, len(toks)),
            "intensity": float(bool(EMOJI.search(text)) or "!" in text or any(w in INTENSIFIERS for w in toks)),
            "anchor_emotion": float((emo_anchors @ resp).max()),
            "anchor_empathy": float((emp_anchors @ resp).max()),
            "you_ratio": sum(w in YOU_WORDS for w in toks) / max(1, len(toks)),
            "names_feeling": float(any(w in AFFECT_WORDS for w in toks)),
            "dismissive": float(any(re.search(p, text, flags=re.I) for p in DISMISSIVE)),
            "mood_mismatch": float(mood_mismatch(item.dialogue, text)),
            "meta_talk": float(has_meta_talk(text)),
            "other_tag": float(other_speaker_tag(text, item)),
            "repetition": 1.0 - len(set(toks)) / len(toks) if len(toks) > 20 else 0.0,
        }

    def _score(self, item: JudgeItem, emo_anchors: np.ndarray, emp_anchors: np.ndarray) -> Verdict:
        if not item.response.strip():
            scores = {k: 1.0 for k in CRITERIA}
            return Verdict(scores, True, raw=json.dumps({"empty": True}), meta={"signals": {"empty": 1.0}})
        g = self.signals(item, emo_anchors, emp_anchors)
        consistency = lin01(g["own_sim"], "own_sim") if np.isnan(g["margin"]) else lin01(g["margin"], "margin")
        relevance = lin01(g["relevance"], "relevance")
        info = lin01(g["info_words"], "info_words")
        novelty = 0.5 * lin01(g["novelty"], "novelty") + 0.5 * g["new_word_share"]
        contribution = novelty * (0.5 + 0.5 * info)
        emotion = 0.5 * lin01(g["affect_density"], "affect_density") + 0.3 * lin01(g["anchor_emotion"], "anchor_emotion") + 0.2 * g["intensity"]
        empathy = (0.55 * lin01(g["anchor_empathy"], "anchor_empathy") + 0.25 * lin01(g["you_ratio"], "you_ratio")
                   + 0.20 * g["names_feeling"] - 0.3 * g["dismissive"])
        scores = {"emotion": to_score(emotion), "empathy": to_score(empathy), "consistency": to_score(consistency),
                  "relevance": to_score(relevance), "contribution": to_score(contribution)}
        scores["contribution"] = min(scores["contribution"], scores["relevance"] + 1.0)
        if g["mood_mismatch"]:  # celebrating a loss or a failure: the wrong feeling, and not listening
            scores["emotion"] = max(1.0, scores["emotion"] - 2.0)
            scores["empathy"] = max(1.0, scores["empathy"] - 2.0)
            scores["relevance"] = max(1.0, scores["relevance"] - 1.0)
        # Format checks: breaking character or format caps the affected criteria.
        if g["meta_talk"]:
            scores["consistency"] = 1.0
            scores["emotion"] = max(1.0, scores["emotion"] - 1.0)
            scores["empathy"] = max(1.0, scores["empathy"] - 1.0)
        if g["other_tag"]:
            scores["consistency"] = min(scores["consistency"], 1.5)
            scores["contribution"] = max(1.0, scores["contribution"] - 1.0)
        if g["n_words"] < MIN_WORDS or g["repetition"] > 0.6:
            scores = {k: min(v, 2.0) for k, v in scores.items()}
        if g["n_words"] > MAX_WORDS:
            scores["relevance"] = max(1.0, scores["relevance"] - 1.0)
            scores["consistency"] = max(1.0, scores["consistency"] - 1.0)
        scores = {k: round(v, 2) for k, v in scores.items()}
        raw = json.dumps({k: round(v, 4) for k, v in g.items()})
        return Verdict(scores, True, raw=raw, meta={"signals": g})
