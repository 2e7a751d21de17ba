"""The semantic layer of the crisis detector at run time: the bundled all-MiniLM-L6-v2 encoder with a LoRA on
its top layers and a logistic head, fine-tuned on the shipped labelled messages (`mascot.safety.training.fitting`
fits it), averaged with a character n-gram model (`mascot.safety.lexical`) for the message classifier.

The LoRA is merged into one private copy of the encoder, loaded once per process (`load_classifier`); a check
is one forward pass. The saved metadata (`classifier.json`) holds the thresholds chosen by cross-validation.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError
from mascot.files.model_files import embedding_model_dir
from mascot.safety.lexical import LexicalModel, combine

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "safety" / "model"  # the shipped classifiers
MAX_TOKENS = 128
HIDDEN = 384
NUM_LAYERS = 6
CACHE_SIZE = 20_000


def tokenizer_and_encoder():  # type: ignore[no-untyped-def]
    """The bundled sentence encoder and its tokenizer, freshly loaded (each classifier adapts its own copy)."""
    from transformers import AutoModel, AutoTokenizer

    path = embedding_model_dir()
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)


def mean_pool(hidden, mask):  # type: ignore[no-untyped-def]
    """The mean of the token states over the attention mask (the sentence embedding)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def read_meta(name: str, root: Path = MODEL_DIR) -> dict:
    """The saved metadata of classifier `name` (thresholds, config, cross-validation figures)."""
    path = root / name / "classifier.json"
    if not path.exists():
        raise ConfigError(f"The safety classifier {path} is missing: run `python -m mascot safety train` to build it.")
    return json.loads(path.read_text(encoding="utf-8"))


class Classifier:
    """A fine-tuned classifier ready to score texts: merged encoder + head, on CPU."""

    def __init__(self, name: str, root: Path = MODEL_DIR) -> None:
        import torch
        from peft import PeftModel

        self.name = name
        self.meta = read_meta(name, root)
        self.tokenizer, base = tokenizer_and_encoder()
        self.encoder = PeftModel.from_pretrained(base, str(root / name)).merge_and_unload().eval()
        self.weight = torch.tensor(self.meta["head"]["weight"])
        self.bias = float(self.meta["head"]["bias"])
        # the message classifier averages the encoder with a character n-gram model (mascot.safety.lexical); a
        # classifier without a lexical file (the reply classifier) scores with the encoder alone
        self.lexical = LexicalModel.load(root / name)
        self.lexical_weight = float(self.meta.get("lexical_weight", 0.5)) if self.lexical else 0.0
        self._lock = threading.Lock()
        self._cache: dict[str, float] = {}  # text -> score: the previous turns' window is scored once

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """Probability of the positive class for each text (empty texts score 0); cached per text."""
        import torch

        out = np.zeros(len(texts), np.float32)
        with self._lock:
            todo = sorted({t for t in texts if t and t.strip() and t not in self._cache})
            if todo:
                with torch.inference_mode():
                    b = self.tokenizer(todo, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
                    pooled = mean_pool(self.encoder(**b).last_hidden_state, b["attention_mask"])
                    scores = torch.sigmoid(pooled @ self.weight + self.bias).numpy()
                if self.lexical is not None:
                    scores = combine(scores, self.lexical.predict(todo), self.lexical_weight)
                scores = scores.tolist()
                if len(self._cache) + len(todo) > CACHE_SIZE:
                    self._cache.clear()
                self._cache.update(zip(todo, scores))
            for i, t in enumerate(texts):
                out[i] = self._cache.get(t, 0.0) if t and t.strip() else 0.0
        return out


@functools.lru_cache(maxsize=4)
def load_classifier(name: str, root: Path = MODEL_DIR) -> Classifier:
    """One Classifier per name per process."""
    return Classifier(name, root)


