"""Evaluation metrics: the 1–5 -> 0–100 mapping, mean ± std, and the automatic diversity metrics
(distinct-n, self-BLEU across personas in a round, mean embedding cosine between their turns).

BLEU is implemented here (sentence BLEU-4, uniform weights, brevity penalty against the closest
reference length, NLTK's `method1` smoothing: a zero n-gram match count becomes 0.1), because
neither sacrebleu nor nltk is a dependency.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from mascot.errors import unknown_name
from mascot.judges.lexicon import words

# paper.md §7.16: (s - 1) / 4 * 100 by default; "x20" is the alternative s * 20.
MAPPINGS = ("linear", "x20")


def to_100(score: float, mapping: str = "linear") -> float:
    """Map a 1–5 judge score onto 0–100.

    >>> to_100(1), to_100(3), to_100(5), to_100(3, "x20")
    (0.0, 50.0, 100.0, 60.0)
    """
    if mapping == "linear":
        return (score - 1.0) / 4.0 * 100.0
    if mapping == "x20":
        return score * 20.0
    raise unknown_name("score mapping", mapping, MAPPINGS)


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (ddof=1; 0 for a single value) and count, NaNs dropped."""
    v = [x for x in values if x is not None and not math.isnan(x)]
    if not v:
        return {"mean": math.nan, "std": math.nan, "n": 0}
    arr = np.asarray(v, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, "n": len(arr)}


def tokens(text: str) -> list[str]:
    return words(text)


def ngrams(toks: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct-n: unique n-grams / total n-grams over all `texts` together (0 when there are none).

    >>> distinct_n(["a b a b"], 1), distinct_n(["a b a b"], 2)
    (0.5, 0.6666666666666666)
    """
    grams = [g for t in texts for g in ngrams(tokens(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def sentence_bleu(hypothesis: str, references: Sequence[str], max_n: int = 4) -> float:
    """Sentence BLEU of `hypothesis` against `references` (0..1), NLTK method1 smoothing."""
    hyp = tokens(hypothesis)
    refs = [tokens(r) for r in references]
    if not hyp or not any(refs):
        return 0.0
    log_p = 0.0
    for n in range(1, max_n + 1):
        h = Counter(ngrams(hyp, n))
        total = sum(h.values())
        if total == 0:  # hypothesis shorter than n: NLTK treats the precision as 0 -> smoothed
            log_p += math.log(0.1 / 1)
            continue
        best: Counter[tuple[str, ...]] = Counter()
        for r in refs:
            for g, c in Counter(ngrams(r, n)).items():
                best[g] = max(best[g], c)
        matches = sum(min(c, best[g]) for g, c in h.items())
        log_p += math.log((matches if matches > 0 else 0.1) / total)
    ref_len = min((len(r) for r in refs), key=lambda rl: (abs(rl - len(hyp)), rl))
    bp = 1.0 if len(hyp) > ref_len else math.exp(1 - ref_len / len(hyp))
    return bp * math.exp(log_p / max_n)


def self_bleu(texts: Sequence[str]) -> float | None:
    """Mean BLEU of each text against the others (higher = more redundant); None for < 2 texts."""
    texts = [t for t in texts if t.strip()]
    if len(texts) < 2:
        return None
    return float(np.mean([sentence_bleu(t, texts[:i] + texts[i + 1 :]) for i, t in enumerate(texts)]))


def mean_pairwise_cosine(vectors: np.ndarray) -> float | None:
    """Mean cosine over all pairs of unit vectors (embedding redundancy); None for < 2 vectors."""
    k = len(vectors)
    if k < 2:
        return None
    sims = vectors @ vectors.T
    return float((sims.sum() - np.trace(sims)) / (k * (k - 1)))


def persona_identifiability(scenarios: Sequence[str], personas: Sequence[str], vectors: np.ndarray) -> dict[str, float | int | None]:
    """How well the persona that wrote each turn can be told from its text alone.

    Leave-one-scenario-out nearest-centroid classification on (unit) sentence embeddings: for each
    scenario, every persona's centroid is the mean of its turns in all *other* scenarios, and each turn
    of the held-out scenario is assigned to the most cosine-similar centroid. Returns the accuracy, the
    number of turns classified, and chance = 1 / number of personas.

    >>> v = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=float)
    >>> persona_identifiability(["s1", "s1", "s2", "s2"], ["A", "B", "A", "B"], v)["accuracy"]
    1.0
    """
    names = sorted(set(personas))
    if len(names) < 2 or len(set(scenarios)) < 2:
        return {"accuracy": None, "n": 0, "chance": (1 / len(names)) if names else None, "personas": len(names)}
    vecs = np.asarray(vectors, dtype=np.float64)
    idx = {n: i for i, n in enumerate(names)}
    labels = np.array([idx[p] for p in personas])
    scen = np.asarray(list(scenarios))
    sums = np.zeros((len(names), vecs.shape[1]))
    counts = np.zeros(len(names))
    np.add.at(sums, labels, vecs)
    np.add.at(counts, labels, 1)
    correct = n = 0
    for s in sorted(set(scen)):
        mask = scen == s
        s_sums, s_counts = sums.copy(), counts.copy()
        np.subtract.at(s_sums, labels[mask], vecs[mask])
        np.subtract.at(s_counts, labels[mask], 1)
        have = s_counts > 0
        cents = np.where(have[:, None], s_sums / np.maximum(s_counts, 1)[:, None], 0.0)
        norms = np.linalg.norm(cents, axis=1)
        cents = cents / np.where(norms > 0, norms, 1)[:, None]
        sims = vecs[mask] @ cents.T
        sims[:, ~have] = -np.inf  # a persona with no turns elsewhere cannot be predicted
        correct += int((sims.argmax(axis=1) == labels[mask]).sum())
        n += int(mask.sum())
    return {"accuracy": correct / n if n else None, "n": n, "chance": 1 / len(names), "personas": len(names)}


def paired_test(a: dict[str, float], b: dict[str, float]) -> dict[str, float | int | None]:
    """Paired comparison of two systems' per-scenario scores (scenario id -> score), on the scenarios
    both have: mean difference a - b and the two-sided Wilcoxon signed-rank p-value (scipy.stats)."""
    from scipy.stats import wilcoxon

    keys = sorted(set(a) & set(b))
    diffs = np.array([a[k] - b[k] for k in keys], dtype=float)
    if len(keys) == 0:
        return {"n": 0, "mean_diff": None, "p": None}
    p = None
    if len(keys) >= 2 and np.any(diffs != 0):
        p = float(wilcoxon(diffs, zero_method="wilcox", alternative="two-sided").pvalue)
    return {"n": len(keys), "mean_diff": round(float(diffs.mean()), 3), "p": None if p is None else round(p, 5),
            "mean_a": round(float(np.mean([a[k] for k in keys])), 3), "mean_b": round(float(np.mean([b[k] for k in keys])), 3)}
