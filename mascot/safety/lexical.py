"""The lexical half of the crisis message classifier: character and word n-grams with a logistic head.

Why a second model: the fine-tuned sentence encoder reads meaning but misses what spelling carries (slang,
typos, words run together, short non-English lines), and a character n-gram model reads exactly that. Their
errors differ, so averaging the two in logit space catches more crisis messages at the same false-positive
rate: out of fold on the training split of the core and confusable lines, recall at a 5% hard-negative FPR rose
from 0.774 (encoder alone) to 0.797, and at 10% from 0.844 to 0.883 (`benchmarks/safety_cv.py`, docs/safety.md).

Features are hashed (no vocabulary to store): `char_wb` 2-5-grams and word 1-2-grams, each part with
sublinear term frequency, inverse document frequency and its own L2 norm, as scikit-learn's
`TfidfVectorizer` computes them. Training uses scikit-learn (`HashingVectorizer`, `LogisticRegression`); the
shipped model is three plain arrays in `lexical.npz` (no pickle). Scoring computes the same features in plain
Python and numpy (`hashed_counts`: scikit-learn's analyzers and its signed 32-bit MurmurHash3), so the chat
imports neither scikit-learn nor scipy; `tests/test_safety_runtime.py` checks the logits against
scikit-learn's to 1e-9. Under a millisecond per text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError

N_FEATURES = 2**18  # per part (characters, words)
C = 16.0  # inverse regularisation of the logistic head (out-of-fold comparison of 1, 4, 16, 64)
FILE = "lexical.npz"
CHAR_NGRAMS = (2, 5)
WORD_NGRAMS = (1, 2)
_WHITE_SPACES = re.compile(r"\s\s+")  # scikit-learn's whitespace normalisation and default token pattern
_WORD = re.compile(r"(?u)\b\w\w+\b")


def char_wb_ngrams(text: str) -> list[str]:
    """scikit-learn's `char_wb` analyzer: lower-cased, each word padded with a space on both sides, its
    n-grams; a word shorter than n counts once, for the smallest such n."""
    lo, hi = CHAR_NGRAMS
    grams: list[str] = []
    for w in _WHITE_SPACES.sub(" ", text.lower()).split():
        w = " " + w + " "
        for n in range(lo, hi + 1):
            grams.extend(w[i : i + n] for i in range(max(len(w) - n, 0) + 1))
            if len(w) <= n:
                break
    return grams


def word_ngrams(text: str) -> list[str]:
    """scikit-learn's `word` analyzer: lower-cased words of two or more word characters, then each run of up to
    two words joined by a space."""
    words = _WORD.findall(text.lower())
    lo, hi = WORD_NGRAMS
    return [" ".join(words[i : i + n]) for n in range(lo, hi + 1) for i in range(len(words) - n + 1)]


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmurhash3_32(keys: Sequence[bytes], seed: int = 0) -> np.ndarray:
    """MurmurHash3 (x86, 32 bits) of each key, as signed int32 like `sklearn.utils.murmurhash3_32`. All keys at
    once, a column of 4-byte blocks per step: keys sorted longest first, so the keys still in their full blocks
    and those at their tail block are two consecutive ranges."""
    c1, c2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
    order = np.argsort(-np.fromiter(map(len, keys), np.int64, len(keys)), kind="stable")
    lengths = np.fromiter((len(keys[i]) for i in order), np.int64, len(keys))
    width = (int(lengths[0]) // 4 + 1) * 4 if len(keys) else 4  # zero padding: a tail block reads as little-endian
    blocks = np.frombuffer(b"".join(keys[i].ljust(width, b"\0") for i in order), "<u4").reshape(len(keys), width // 4)
    # block column j: keys [0, full) hold all four bytes of it, keys [full, tail) end inside it
    cols = np.arange(blocks.shape[1])
    fulls = np.searchsorted(-lengths, -4 * (cols + 1), side="right").tolist()  # lengths >= 4 (j + 1)
    tails = np.searchsorted(-lengths, -4 * cols, side="left").tolist()  # lengths > 4 j
    h = np.full(len(keys), seed, np.uint32)
    for j, full, tail in zip(cols.tolist(), fulls, tails):
        k = _rotl(blocks[:tail, j] * c1, 15) * c2
        h[:full] = _rotl(h[:full] ^ k[:full], 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h[full:tail] ^= k[full:tail]
    h ^= lengths.astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    out = np.empty(len(keys), np.uint32)
    out[order] = h
    return out.view(np.int32)


def hashed_counts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero hashed n-gram counts of `texts`, as `HashingVectorizer(alternate_sign=False)` gives them
    (column |h| mod N_FEATURES, |-2**31| taken as 2**31): rows (two per text: characters, words), columns within
    the part and counts, sorted by row and column."""
    grams = [analyzer(t) for t in texts for analyzer in (char_wb_ngrams, word_ngrams)]
    columns = np.abs(murmurhash3_32([g.encode("utf-8") for gs in grams for g in gs]).astype(np.int64)) % N_FEATURES
    rows = np.repeat(np.arange(len(grams), dtype=np.int64), [len(gs) for gs in grams])
    keys, counts = np.unique(rows * N_FEATURES + columns, return_counts=True)
    return keys // N_FEATURES, keys % N_FEATURES, counts


def _vectorizers():  # type: ignore[no-untyped-def]
    """scikit-learn's hashing of the same n-grams, for fitting."""
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
        return self.exact_logits(texts).astype(np.float32)

    def exact_logits(self, texts: Sequence[str]) -> np.ndarray:
        """The head's logit for each text in float64: `_tfidf`'s rows times the coefficients, per text and part."""
        rows, columns, counts = hashed_counts(texts)
        cols = (rows % 2) * N_FEATURES + columns
        x = (1.0 + np.log(counts)) * self.idf[cols].astype(np.float64)
        norms = np.sqrt(np.bincount(rows, x * x, minlength=2 * len(texts)).astype(np.float64))
        dots = np.bincount(rows, x * self.coef[cols].astype(np.float64), minlength=2 * len(texts)).astype(np.float64)
        parts = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
        return parts.reshape(len(texts), 2).sum(1) + self.intercept

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
