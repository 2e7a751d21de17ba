"""The acceptability scorer: how likely a person would accept a reply, from the conversation and the reply.

Features: the bundled MiniLM's embeddings of the user's last message (u) and the reply (r) as r, u*r and
cos(u, r), and the fault detectors (`mascot.acceptability.faults`). Two linear heads read them: acceptability
(a three-class softmax over not acceptable / borderline / acceptable; the score is P(acceptable) +
P(borderline) / 2) and persona fit (P(fits), one weight vector per persona over r). The heads are fitted by
`mascot.acceptability.training` with scikit-learn; here they are matrices, so the chat path runs the numpy
encoder and two matrix products (no torch, no scikit-learn).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from mascot.acceptability.faults import FEATURE_NAMES, Faults, detect
from mascot.acceptability.labels import LABELS
from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue

log = logging.getLogger(__name__)

MODEL_DIR = Path(__file__).parent / "model"
MAX_TOKENS = 128
HIDDEN = 384


@dataclass
class ReplyScore:
    """One reply's scores: acceptability in [0, 1], persona fit in [0, 1], and the faults found."""

    acceptability: float
    persona_fit: float
    faults: list[str] = field(default_factory=list)
    p_acceptable: float = 0.0
    p_unacceptable: float = 0.0

    def combined(self, fit_weight: float) -> float:
        return self.acceptability + fit_weight * self.persona_fit


@lru_cache(maxsize=1)
def minilm_encoder():  # type: ignore[no-untyped-def]
    """The bundled all-MiniLM-L6-v2 as the numpy encoder (shared with nothing else; loaded once)."""
    from mascot.files.model_files import embedding_model_dir
    from mascot.safety.encoder import BertEncoder

    d = embedding_model_dir()
    return BertEncoder.load(d, d / "model.safetensors", MAX_TOKENS)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-8)


def features(user_vecs: np.ndarray, reply_vecs: np.ndarray, faults: Sequence[Faults],
             joint: np.ndarray | None = None) -> np.ndarray:
    """The acceptability head's input rows: [r, u*r, cos(u, r), fault features] and, with a joint encoder, the
    log-odds it gives the pair."""
    u, r = unit(user_vecs), unit(reply_vecs)
    cos = (u * r).sum(-1, keepdims=True)
    f = np.array([x.vector() for x in faults], np.float32).reshape(len(faults), len(FEATURE_NAMES))
    parts = [r, u * r, cos, f]
    if joint is not None:
        p = np.clip(joint.astype(np.float64), 1e-4, 1 - 1e-4)
        parts.append(np.log(p / (1 - p)).reshape(-1, 1))
    return np.concatenate(parts, axis=1).astype(np.float32)


def joint_text(dialogue: Dialogue, reply: str) -> str:
    """The joint encoder's input: the user's last message and the reply in one sequence (the encoder attends
    across both, which two separate embeddings cannot)."""
    return f"{dialogue.last_user_text() or dialogue.situation or ''} [SEP] {reply}"


def fit_features(reply_vecs: np.ndarray, persona_index: Sequence[int], n_personas: int) -> np.ndarray:
    """The persona-fit head's input rows: the reply embedding in its persona's block (one linear model each)."""
    r = unit(reply_vecs)
    out = np.zeros((len(r), n_personas * (HIDDEN + 1)), np.float32)
    for i, k in enumerate(persona_index):
        out[i, k * (HIDDEN + 1): (k + 1) * (HIDDEN + 1)] = np.append(r[i], 1.0)
    return out


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


class AcceptabilityScorer:
    """Scores replies to a conversation; see the module docstring for what it reads."""

    def __init__(self, accept_w: np.ndarray, accept_b: np.ndarray, fit_w: np.ndarray, fit_b: float,
                 personas: list[str], card: dict | None = None, encoder=None, joint=None) -> None:  # type: ignore[no-untyped-def]
        self.accept_w, self.accept_b = accept_w, accept_b  # (features, 3), (3,)
        self.fit_w, self.fit_b = fit_w, fit_b  # (personas * (hidden + 1),), scalar
        self.personas = personas
        self.card = card or {}
        self._encoder = encoder
        self.joint = joint  # a mascot.safety.classifier.Classifier over joint_text, when the scorer has one

    @property
    def encoder(self):  # type: ignore[no-untyped-def]
        return self._encoder or minilm_encoder()

    @classmethod
    def load(cls, folder: str | Path | None = None) -> AcceptabilityScorer:
        """The scorer saved by `python -m mascot accept train` (default: the one shipped in the package)."""
        from safetensors.numpy import load_file

        folder = Path(folder or MODEL_DIR)
        weights, card_path = folder / "scorer.safetensors", folder / "scorer.json"
        if not weights.exists() or not card_path.exists():
            raise ConfigError(f"No acceptability scorer in {folder} (scorer.safetensors and scorer.json): train one "
                              "with `python -m mascot accept train`.")
        w = load_file(str(weights))
        card = json.loads(card_path.read_text(encoding="utf-8"))
        if card.get("features") != list(FEATURE_NAMES):
            raise ConfigError(f"The scorer in {folder} was trained on other fault features; retrain it with "
                              "`python -m mascot accept train`.")
        joint = None
        if card.get("joint"):
            from mascot.safety.classifier import Classifier

            joint = Classifier("joint", folder)
        return cls(w["accept_w"], w["accept_b"], w["fit_w"], float(w["fit_b"][0]), card["personas"], card, joint=joint)

    def save(self, folder: str | Path) -> None:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"accept_w": self.accept_w.astype(np.float32), "accept_b": self.accept_b.astype(np.float32),
                   "fit_w": self.fit_w.astype(np.float32), "fit_b": np.array([self.fit_b], np.float32)},
                  str(folder / "scorer.safetensors"))
        card = {**self.card, "personas": self.personas, "features": list(FEATURE_NAMES), "labels": list(LABELS)}
        (folder / "scorer.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")

    def class_probabilities(self, x: np.ndarray) -> np.ndarray:
        return softmax(x @ self.accept_w + self.accept_b)

    def score(self, dialogue: Dialogue, persona: str, replies: Sequence[str]) -> list[ReplyScore]:
        """Scores of several candidate replies by `persona` to the same conversation."""
        return self.score_many([(dialogue, persona, r) for r in replies])

    def score_many(self, items: Sequence[tuple[Dialogue, str, str]]) -> list[ReplyScore]:
        """Scores of (conversation, persona, reply) items, encoded in one pass."""
        if not items:
            return []
        users = [d.last_user_text() or d.situation or "" for d, _, _ in items]
        texts = list(dict.fromkeys(users + [r for _, _, r in items]))
        vecs = self.encoder.embed(texts)
        at = {t: i for i, t in enumerate(texts)}
        u = vecs[[at[t] for t in users]]
        r = vecs[[at[x] for _, _, x in items]]
        faults = [detect(d, x) for d, _, x in items]
        joint = self.joint.score([joint_text(d, x) for d, _, x in items]) if self.joint is not None else None
        p = self.class_probabilities(features(u, r, faults, joint))
        accept = p[:, 2] + 0.5 * p[:, 1]
        idx = [self.personas.index(name) if name in self.personas else -1 for _, name, _ in items]
        fit = np.full(len(items), 0.5, np.float32)  # a persona the head never saw: no opinion
        known = [i for i, k in enumerate(idx) if k >= 0]
        if known:
            x = fit_features(r[known], [idx[i] for i in known], len(self.personas))
            fit[known] = 1.0 / (1.0 + np.exp(-(x @ self.fit_w + self.fit_b)))
        return [ReplyScore(float(a), float(f), fl.found(), float(q[2]), float(q[0]))
                for a, f, fl, q in zip(accept, fit, faults, p)]
