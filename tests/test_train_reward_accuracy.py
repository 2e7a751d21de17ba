"""Reward-model accuracy (pair accuracy with its 95 % interval, per pair source) and the embedding RM kind."""

from __future__ import annotations

import numpy as np
import pytest

from mascot.rewards.embedding_rm import (
    EmbeddingRewardModel,
    is_embedding_rm,
    load_reward_model,
    split_rm_prompt,
    train_embedding_rm,
)
from mascot.train.stage1.reward_model import accuracy_report, accuracy_with_ci


class _LengthRM:
    """Scores a reply by its number of words (a fixed, known rule)."""

    def score_texts(self, prompts, responses):
        return [float(len(r.split())) for r in responses]


PAIRS = [
    {"prompt": "p", "chosen": "a b c", "rejected": "a", "source": "judge"},          # right
    {"prompt": "p", "chosen": "a", "rejected": "a b", "source": "judge"},            # wrong
    {"prompt": "p", "chosen": "a b", "rejected": "a b", "source": "judge"},          # tie counts as wrong
    {"prompt": "p", "chosen": "a b c d", "rejected": "a b", "source": "cross_persona"},  # right
    {"prompt": "p", "chosen": "a b c d e", "rejected": "a", "source": "cross_persona"},  # right
]


def test_accuracy_report_on_a_fixed_tiny_set() -> None:
    rep = accuracy_report(_LengthRM(), PAIRS)
    assert rep["accuracy"] == 0.6 and rep["n"] == 5 and rep["correct"] == 3
    lo, hi = rep["ci95"]
    assert lo == pytest.approx(0.2307, abs=1e-3) and hi == pytest.approx(0.8824, abs=1e-3)  # Wilson interval
    assert rep["by_source"]["judge"]["accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    assert rep["by_source"]["cross_persona"] == {"accuracy": 1.0, "n": 2, "correct": 2, "ci95": rep["by_source"]["cross_persona"]["ci95"]}
    assert accuracy_report(_LengthRM(), []) is None
    assert accuracy_with_ci([])["accuracy"] is None


class _TableEmbedder:
    """Deterministic fake embeddings: a fixed random unit vector per distinct text."""

    def __init__(self, dim: int = 8) -> None:
        self.dim, self.cache, self.rng = dim, {}, np.random.default_rng(0)

    def encode(self, texts):
        out = []
        for t in texts:
            if t not in self.cache:
                v = self.rng.normal(size=self.dim)
                self.cache[t] = (v / np.linalg.norm(v)).astype(np.float32)
            out.append(self.cache[t])
        return np.stack(out)


def test_split_rm_prompt_round_trips_the_rm_prompt(es_pack) -> None:
    from mascot.group.dialogue import Dialogue, Turn
    from mascot.rewards.persona_rm import rm_prompt

    text = rm_prompt(es_pack.get("Anchor"), Dialogue([Turn("user", "I failed my test")], situation="exam"))
    persona, conv = split_rm_prompt(text)
    assert persona.startswith("Anchor (") and "I failed my test" in conv and "Situation: exam" in conv
    assert split_rm_prompt("free text") == ("", "free text")


def test_embedding_rm_learns_a_persona_rule_and_round_trips(tmp_path) -> None:
    emb = _TableEmbedder()
    # persona A prefers the "a*" replies, persona B the "b*" replies: learnable from r*p features
    prompts = {"A": "Persona: A card\n\nConversation:\nUser: hi\n\nNext message from A:\n",
               "B": "Persona: B card\n\nConversation:\nUser: hi\n\nNext message from B:\n"}
    pairs = []
    for i in range(30):
        pairs.append({"prompt": prompts["A"], "chosen": f"a{i % 6}", "rejected": f"b{i % 6}", "group_id": f"s{i}:a"})
        pairs.append({"prompt": prompts["B"], "chosen": f"b{i % 6}", "rejected": f"a{i % 6}", "group_id": f"s{i}:b"})
    model, metrics = train_embedding_rm(pairs, lrs=[1e-2], weight_decays=[0.0], epochs=80, hidden=8, seed=0, embedder=emb)
    assert metrics["train_accuracy"] == 1.0 and metrics["sweep"][0]["val_accuracy"] == 1.0
    assert metrics["last_loss"] < metrics["first_loss"]
    model.save(tmp_path / "rm")
    assert is_embedding_rm(tmp_path / "rm")
    again = load_reward_model("embedded", tmp_path / "rm")
    assert isinstance(again, EmbeddingRewardModel)
    again._embedder = emb
    assert again.score_texts([prompts["A"]], ["a1"]) == pytest.approx(model.score_texts([prompts["A"]], ["a1"]), abs=1e-5)
    assert accuracy_report(again, pairs)["accuracy"] == 1.0
