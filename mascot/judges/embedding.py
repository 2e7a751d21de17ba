"""The bundled sentence-embedding model (all-MiniLM-L6-v2), loaded once per process, with a
per-text cache so repeated texts (persona profiles, user messages) are encoded once."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mascot.files.model_files import embedding_model_dir


@functools.lru_cache(maxsize=1)
def sentence_model() -> Any:
    """The SentenceTransformer on CPU; built on first use and shared by every caller."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedding_model_dir()), device="cpu")


class Embedder:
    """Unit-normalised embeddings with a text -> vector cache (cosine = dot product)."""

    def __init__(self, model: Any = None, batch_size: int = 64, max_cache: int = 50_000) -> None:
        self._model = model
        self.batch_size = batch_size
        self.max_cache = max_cache
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = sentence_model()
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 array of unit vectors; empty strings map to zero vectors."""
        with self._lock:
            todo = sorted({t for t in texts if t and t not in self._cache})
            if todo:
                if len(self._cache) + len(todo) > self.max_cache:
                    self._cache.clear()
                vecs = self.model.encode(todo, batch_size=self.batch_size, normalize_embeddings=True,
                                         convert_to_numpy=True, show_progress_bar=False)
                self._cache.update(zip(todo, vecs.astype(np.float32)))
            dim = self.model.get_embedding_dimension() if not self._cache else len(next(iter(self._cache.values())))
            return np.stack([self._cache[t] if t else np.zeros(dim, np.float32) for t in texts]) if texts else np.zeros((0, dim), np.float32)

    def mean_vector(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised mean of several texts' embeddings (a profile of, e.g., one persona)."""
        v = self.encode([t for t in texts if t]).mean(axis=0)
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v


@functools.lru_cache(maxsize=1)
def shared_embedder() -> Embedder:
    """One Embedder per process, shared by the offline judge and the diversity metrics."""
    return Embedder()
