"""The lexical half of the crisis message classifier: character and word n-grams with a logistic head.

Why a second model: the fine-tuned sentence encoder reads meaning but misses what spelling carries (slang,
typos, words run together, short non-English lines), and a character n-gram model reads exactly that. Their
errors differ, so averaging the two in logit space catches more crisis messages at the same false-positive
rate: out of fold on the training split of the core and confusable lines, recall at a 5% hard-negative FPR rose
from 0.774 (encoder alone) to 0.797, and at 10% from 0.844 to 0.883 (`benchmarks/safety_cv.py`, docs/safety.md).

Features are hashed (no vocabulary to store): `char_wb` 2-5-grams and word 1-2-grams, each part with
sublinear term frequency, inverse document frequency and its own L2 norm, as scikit-learn's
`TfidfVectorizer` computes them. Training uses scikit-learn; the shipped model is three plain arrays in
`lexical.npz` (no pickle), scored here with a few sparse products: well under a millisecond per check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError

N_FEATURES = 2**18  # per part (characters, words)
C = 16.0  # inverse regularisation of the logistic head (out-of-fold comparison of 1, 4, 16, 64)
FILE = "lexical.npz"


def _vectorizers():  # type: ignore[no-untyped-def]
    from sklearn.feature_extraction.text import HashingVectorizer

    common = {"n_features": N_FEATURES, "alternate_sign": False, "norm": None, "lowercase": True}
    return (HashingVectorizer(analyzer="char_wb", ngram_range=(2, 5), **common),
            HashingVectorizer(analyzer="word", ngram_range=(1, 2), **common))


def _counts(texts: Sequence[str]) -> list:  # type: ignore[type-arg]
    return [v.transform(list(texts)).tocsr() for v in _vectorizers()]


def _tfidf(parts: list, idf: np.ndarray):  # type: ignore[no-untyped-def, type-arg]
    """Sublinear tf x idf, each part L2-normalised, parts side by side (a sparse matrix)."""
    from scipy import sparse
    from sklearn.preprocessing import normalize

    out = []
    for k, x in enumerate(parts):
        x = x.astype(np.float64)
        x.data = (1.0 + np.log(x.data)) * idf[k * N_FEATURES + x.indices]
        out.append(normalize(x))
    return sparse.hstack(out, format="csr")


@dataclass
class LexicalModel:
    """Hashed n-gram tf-idf + logistic regression: `idf` and `coef` over both parts, and the intercept."""

    idf: np.ndarray
    coef: np.ndarray
    intercept: float

    @classmethod
    def fit(cls, texts: Sequence[str], labels: Sequence[bool], c: float = C) -> LexicalModel:
        from sklearn.linear_model import LogisticRegression

        if len(set(labels)) < 2:
            raise ConfigError("The lexical crisis model needs both crisis and negative training lines.")
        parts = _counts(texts)
        n = len(texts)
        idf = np.concatenate([np.log((1 + n) / (1 + np.bincount(x.indices, minlength=N_FEATURES))) + 1.0 for x in parts])
        head = LogisticRegression(C=c, max_iter=3000, class_weight="balanced")
        head.fit(_tfidf(parts, idf), np.asarray(labels, bool))
        return cls(idf.astype(np.float32), head.coef_[0].astype(np.float32), float(head.intercept_[0]))

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, np.float32)
        return np.asarray(_tfidf(_counts(texts), self.idf.astype(np.float64)) @ self.coef.astype(np.float64) + self.intercept, np.float32)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """Probability of a crisis for each text."""
        return 1.0 / (1.0 + np.exp(-self.logits(texts)))

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (FILE + ".tmp.npz")
        np.savez_compressed(tmp, idf=self.idf, coef=self.coef, intercept=np.array([self.intercept], np.float32))
        tmp.replace(folder / FILE)
        return folder / FILE

    @classmethod
    def load(cls, folder: Path) -> LexicalModel | None:
        """The model saved in `folder`, or None when there is none (an encoder-only classifier)."""
        path = folder / FILE
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                idf, coef, b = z["idf"], z["coef"], float(z["intercept"][0])
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"{path} is not a readable lexical crisis model ({exc}); restore it from the repository "
                              "or retrain with `python -m mascot safety train`.") from exc
        if idf.shape != (2 * N_FEATURES,) or coef.shape != (2 * N_FEATURES,):
            raise ConfigError(f"{path} holds arrays of the wrong size for {2 * N_FEATURES} hashed features; retrain it.")
        return cls(idf, coef, b)


def combine(encoder_p: np.ndarray, lexical_p: np.ndarray, weight: float) -> np.ndarray:
    """The classifier's score: sigmoid of the weighted mean of both models' logits (`weight` on the lexical one)."""
    def logit(p: np.ndarray) -> np.ndarray:
        p = np.clip(np.asarray(p, np.float64), 1e-7, 1 - 1e-7)
        return np.log(p / (1 - p))

    z = (1.0 - weight) * logit(encoder_p) + weight * logit(lexical_p)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def out_of_fold(texts: Sequence[str], labels: Sequence[bool], folds: int, seed: int) -> tuple[np.ndarray, LexicalModel]:
    """Out-of-fold probabilities on the same stratified folds as the encoder's `Fitter.out_of_fold`, and the
    first fold's model (shipped with the first fold's encoder)."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels, bool)
    oof = np.zeros(len(y), np.float32)
    first = None
    for fit_pos, hold_pos in StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        model = LexicalModel.fit([texts[i] for i in fit_pos], y[fit_pos])
        oof[hold_pos] = model.predict([texts[i] for i in hold_pos])
        first = first or model
    assert first is not None
    return oof, first
