"""The semantic layer of the crisis detector at run time: the bundled all-MiniLM-L6-v2 encoder with a LoRA and
a logistic head, fine-tuned on the shipped labelled messages (`mascot.safety.training.fitting` fits it),
averaged with a character n-gram model (`mascot.safety.lexical`) for the message classifier.

The LoRA is merged into one private copy of the encoder, cached as a file (`merged_weights`) and loaded once per
process (`load_classifier`); a check is one forward pass. The pass runs in numpy (`mascot.safety.encoder`) so
that the chat starts without importing torch, transformers or scikit-learn; torch and peft serve training and
the one-off merge. The saved metadata (`classifier.json`) holds the thresholds chosen by cross-validation.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError
from mascot.files.model_files import default_cache_dir, embedding_model_dir
from mascot.safety.encoder import BertEncoder
from mascot.safety.lexical import LexicalModel, combine

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "safety" / "model"  # the shipped classifiers
MAX_TOKENS = 128
HIDDEN = 384
NUM_LAYERS = 6
CACHE_SIZE = 20_000


def tokenizer_and_encoder():  # type: ignore[no-untyped-def]
    """The bundled sentence encoder and its tokenizer in transformers, freshly loaded (training adapts its own
    copy per classifier)."""
    from transformers import AutoModel, AutoTokenizer

    path = embedding_model_dir()
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)


def mean_pool(hidden, mask):  # type: ignore[no-untyped-def]
    """The mean of the token states over the attention mask (the sentence embedding), in torch for training."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def read_meta(name: str, root: Path = MODEL_DIR) -> dict:
    """The saved metadata of classifier `name` (thresholds, config, cross-validation figures)."""
    path = root / name / "classifier.json"
    if not path.exists():
        raise ConfigError(f"The safety classifier {path} is missing: run `python -m mascot safety train` to build it.")
    return json.loads(path.read_text(encoding="utf-8"))


def merged_weights(folder: Path) -> Path:
    """The safetensors file of the bundled encoder with the classifier's LoRA (in `folder`) merged in, cached
    under the cache folder by the hash of the adapter and the encoder's config. The first call for an adapter
    builds it with transformers and peft; every later start reads the file and imports neither."""
    base = embedding_model_dir()
    digest = hashlib.sha256()
    for path in (folder / "adapter_config.json", folder / "adapter_model.safetensors", base / "config.json"):
        digest.update(path.read_bytes())
    digest.update(str((base / "model.safetensors").stat().st_size).encode())
    cached = default_cache_dir() / "safety-encoders" / f"{folder.name}-{digest.hexdigest()[:16]}.safetensors"
    if not cached.exists():
        _merge(folder, base, cached)
    return cached


def _merge(folder: Path, base: Path, cached: Path) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import AutoModel

    encoder = PeftModel.from_pretrained(AutoModel.from_pretrained(base), str(folder)).merge_and_unload().eval()
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: never a half-written cache
    with torch.no_grad():
        save_file({k: v.contiguous() for k, v in encoder.state_dict().items()}, str(tmp))
    tmp.replace(cached)


class ScoreCache:
    """Scores per text, computed once by `compute` (a batch of distinct non-empty texts -> one float each) and kept
    (the previous turns' window is scored once); empty texts score 0. Thread-safe; cleared when it outgrows
    CACHE_SIZE."""

    def __init__(self, compute: Callable[[list[str]], list[float]], dtype: type = np.float32) -> None:
        self._compute = compute
        self._dtype = dtype
        self._lock = threading.Lock()
        self._cache: dict[str, float] = {}

    def score(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(texts), self._dtype)
        with self._lock:
            todo = sorted({t for t in texts if t and t.strip() and t not in self._cache})
            if todo:
                scores = self._compute(todo)
                if len(self._cache) + len(todo) > CACHE_SIZE:
                    self._cache.clear()
                self._cache.update(zip(todo, scores))
            for i, t in enumerate(texts):
                out[i] = self._cache.get(t, 0.0) if t and t.strip() else 0.0
        return out

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


class Classifier:
    """A fine-tuned classifier ready to score texts: merged encoder (numpy, `mascot.safety.encoder`) + head."""

    def __init__(self, name: str, root: Path = MODEL_DIR) -> None:
        self.name = name
        self.meta = read_meta(name, root)
        self.encoder = BertEncoder.load(embedding_model_dir(), merged_weights(root / name), MAX_TOKENS)
        self.weight = np.asarray(self.meta["head"]["weight"], np.float32)
        self.bias = np.float32(self.meta["head"]["bias"])
        if self.weight.shape != (self.encoder.hidden,):
            raise ConfigError(f"{root / name / 'classifier.json'} has a head of {self.weight.size} weights for an "
                              f"encoder of width {self.encoder.hidden}: retrain with `python -m mascot safety train`.")
        # the message classifier averages the encoder with a character n-gram model (mascot.safety.lexical); a
        # classifier without a lexical file (the reply classifier) scores with the encoder alone
        self.lexical = LexicalModel.load(root / name)
        self.lexical_weight = float(self.meta.get("lexical_weight", 0.5)) if self.lexical else 0.0
        self._scores = ScoreCache(self._compute, np.float32)

    def clear_cache(self) -> None:
        self._scores.clear()

    def encoder_scores(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's probability for each (non-empty) text, without the lexical model or the cache."""
        z = self.encoder.embed(texts) @ self.weight + self.bias
        return (np.float32(1.0) / (np.float32(1.0) + np.exp(-z))).astype(np.float32)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """Probability of the positive class for each text (empty texts score 0); cached per text."""
        return self._scores.score(texts)

    def _compute(self, texts: list[str]) -> list[float]:
        scores = self.encoder_scores(texts)
        if self.lexical is not None:
            scores = combine(scores, self.lexical.predict(texts), self.lexical_weight)
        return scores.tolist()


@functools.lru_cache(maxsize=4)
def load_classifier(name: str, root: Path = MODEL_DIR) -> Classifier:
    """One Classifier per name per process."""
    return Classifier(name, root)


