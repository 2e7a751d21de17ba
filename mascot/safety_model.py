"""The semantic layer of the crisis detector: the bundled all-MiniLM-L6-v2 encoder with a LoRA on its
top layers and a logistic head, fine-tuned on the shipped labelled messages.

A frozen embedding with a linear head could not separate crisis messages from hard negatives (at
98% recall it flagged about half of them, see docs/safety.md), so the top layers are adapted.
Training caches the frozen lower layers once and runs only the adapted ones, which keeps a full
cross-validated fit within minutes on a CPU. At run time the LoRA is merged into one private copy
of the encoder, loaded once per process; a check is one forward pass.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError
from mascot.models import embedding_model_dir
from mascot.safety_data import DATA_DIR
from mascot.safety_lexical import LexicalModel, combine

log = logging.getLogger(__name__)

MODEL_DIR = DATA_DIR / "model"
MAX_TOKENS = 128
HIDDEN = 384
NUM_LAYERS = 6
CACHE_SIZE = 20_000


@dataclass(frozen=True)
class FitConfig:
    """How one classifier is fine-tuned (top `layers` of the encoder through a rank-`rank` LoRA)."""

    layers: int = 2
    rank: int = 16
    epochs: int = 6
    lr: float = 1e-3
    batch_size: int = 16
    seed: int = 0
    augment: bool = False  # also train on one noisy variant of each training line (kept in its line's fold)


def _tokenizer_and_encoder():  # type: ignore[no-untyped-def]
    from transformers import AutoModel, AutoTokenizer

    path = embedding_model_dir()
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)


def _lora_config(cfg: FitConfig):  # type: ignore[no-untyped-def]
    from peft import LoraConfig

    first = NUM_LAYERS - cfg.layers
    return LoraConfig(r=cfg.rank, lora_alpha=2 * cfg.rank, lora_dropout=0.1, target_modules=["query", "key", "value", "dense"],
                      layers_to_transform=list(range(first, NUM_LAYERS)), layers_pattern="layer")


def _mean_pool(hidden, mask):  # type: ignore[no-untyped-def]
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class Fitter:
    """Fine-tunes classifiers over one cached pass of the frozen lower layers."""

    def __init__(self, texts: Sequence[str], cfg: FitConfig) -> None:
        import torch

        from mascot.safety_data import augment

        self.cfg = cfg
        self.tokenizer, base = _tokenizer_and_encoder()
        base.eval()
        first = NUM_LAYERS - cfg.layers
        self.states: list = []
        # with augmentation, cached example len(texts) + i is the noisy variant of example i: it joins training
        # only together with example i, so a variant never sits in another fold than its line
        self.n = len(texts)
        every = list(texts) + ([augment(t) for t in texts] if cfg.augment else [])
        with torch.no_grad():
            for i in range(0, len(every), 64):
                b = self.tokenizer(every[i : i + 64], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
                hs = base(**b, output_hidden_states=True).hidden_states[first]
                for j in range(hs.shape[0]):
                    self.states.append(hs[j, : int(b["attention_mask"][j].sum())].clone())

    def _forward(self, layers, head, idx: Sequence[int]):  # type: ignore[no-untyped-def]
        import torch

        hs = [self.states[i] for i in idx]
        width = max(h.shape[0] for h in hs)
        x = torch.zeros(len(hs), width, HIDDEN)
        mask = torch.zeros(len(hs), width)
        for j, h in enumerate(hs):
            x[j, : h.shape[0]] = h
            mask[j, : h.shape[0]] = 1
        additive = (1.0 - mask)[:, None, None, :] * torch.finfo(torch.float32).min
        for layer in layers:
            out = layer(x, attention_mask=additive)
            x = out[0] if isinstance(out, tuple) else out
        return head(_mean_pool(x, mask)).squeeze(-1)

    def fit(self, train: Sequence[int], labels: Sequence[bool]):  # type: ignore[no-untyped-def]
        """Train on the examples `train` (indices into the cached texts); returns (peft model, head)."""
        import torch
        from peft import get_peft_model

        torch.manual_seed(self.cfg.seed)
        _, base = _tokenizer_and_encoder()
        head = torch.nn.Linear(HIDDEN, 1)
        model = get_peft_model(base, _lora_config(self.cfg))
        layers = model.base_model.model.encoder.layer[NUM_LAYERS - self.cfg.layers :]
        params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
        opt = torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=0.01)
        if self.cfg.augment:
            train = [*train, *(self.n + i for i in train)]
        y = torch.tensor([float(labels[i % self.n]) for i in train])
        gen = torch.Generator().manual_seed(self.cfg.seed)
        model.train()
        for _ in range(self.cfg.epochs):
            order = torch.randperm(len(train), generator=gen).tolist()
            for s in range(0, len(order), self.cfg.batch_size):
                pos = order[s : s + self.cfg.batch_size]
                logits = self._forward(layers, head, [train[p] for p in pos])
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y[pos])
                opt.zero_grad()
                loss.backward()
                opt.step()
        model.eval()
        return model, head

    def predict(self, fitted, idx: Sequence[int]) -> np.ndarray:  # type: ignore[no-untyped-def]
        """Probabilities for cached examples `idx` under a fitted (model, head)."""
        import torch

        model, head = fitted
        layers = model.base_model.model.encoder.layer[NUM_LAYERS - self.cfg.layers :]
        with torch.no_grad():
            parts = [torch.sigmoid(self._forward(layers, head, idx[i : i + 64])) for i in range(0, len(idx), 64)]
        return torch.cat(parts).numpy() if parts else np.zeros(0, np.float32)

    def out_of_fold(self, train: Sequence[int], labels: Sequence[bool], folds: int):  # type: ignore[no-untyped-def]
        """Stratified k-fold out-of-fold probabilities for `train` (in that order), and the first fold's fitted
        model (trained exactly like the models whose scores set the thresholds)."""
        from sklearn.model_selection import StratifiedKFold

        y = np.array([labels[i] for i in train])
        oof = np.zeros(len(train), np.float32)
        first = None
        for k, (fit_pos, hold_pos) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=self.cfg.seed).split(np.zeros(len(y)), y)):
            fitted = self.fit([train[p] for p in fit_pos], labels)
            oof[hold_pos] = self.predict(fitted, [train[p] for p in hold_pos])
            first = first or fitted
            log.info("fold %d/%d done", k + 1, folds)
        return oof, first


def save(name: str, fitted, meta: dict, root: Path = MODEL_DIR) -> Path:  # type: ignore[no-untyped-def]
    """Write the LoRA adapter, the head and `meta` (thresholds, config, figures) under root/name."""
    model, head = fitted
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    (out / "README.md").unlink(missing_ok=True)  # PEFT's empty model-card template; docs/safety.md describes the model
    meta = {**meta, "head": {"weight": head.weight.detach().reshape(-1).tolist(), "bias": float(head.bias.detach()[0])}}
    tmp = out / "classifier.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    tmp.replace(out / "classifier.json")
    return out


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
        self.tokenizer, base = _tokenizer_and_encoder()
        self.encoder = PeftModel.from_pretrained(base, str(root / name)).merge_and_unload().eval()
        self.weight = torch.tensor(self.meta["head"]["weight"])
        self.bias = float(self.meta["head"]["bias"])
        # the message classifier averages the encoder with a character n-gram model (safety_lexical); the reply
        # classifier and models that predate it have no lexical file and score with the encoder alone
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
                    pooled = _mean_pool(self.encoder(**b).last_hidden_state, b["attention_mask"])
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


def choose_threshold(scores: np.ndarray, positive: np.ndarray, recall: float) -> float:
    """The highest threshold whose recall on `scores` of positives is at least `recall`."""
    pos = np.sort(scores[positive])
    if len(pos) == 0:
        raise ConfigError("No positive examples to choose a threshold from.")
    k = int(np.floor((1.0 - recall) * len(pos) + 1e-9))
    return float(pos[min(k, len(pos) - 1)])


def threshold_for_fpr(scores: np.ndarray, positive: np.ndarray, max_fpr: float) -> float:
    """The lowest threshold whose false-positive rate on `scores` of negatives is at most `max_fpr`."""
    neg = np.sort(scores[~positive])[::-1]
    if len(neg) == 0:
        raise ConfigError("No negative examples to choose a threshold from.")
    k = int(np.floor(max_fpr * len(neg) + 1e-9))  # this many negatives may score at or above it
    return float(np.nextafter(neg[k], np.float32(1.0))) if k < len(neg) else float(neg[-1])


def message_thresholds(oof: np.ndarray, positive: np.ndarray, ordinary: np.ndarray, crisis_max_fpr: float,
                       concern_ordinary_max_fpr: float, context_recall: float) -> dict[str, float]:
    """The three thresholds of the message classifier, all from out-of-fold scores of the training split.

    crisis: the lowest whose false-positive rate on all negatives is at most `crisis_max_fpr` (the group is
    replaced); concern: the lowest whose false-positive rate on the everyday scenario openings (`ordinary`)
    is at most `concern_ordinary_max_fpr` (Anchor asks about safety); context: the highest whose recall is
    at least `context_recall`, the floor a message must reach alone before earlier turns can upgrade it."""
    crisis = threshold_for_fpr(oof, positive, crisis_max_fpr)
    if not ordinary.any():
        raise ConfigError("No everyday openings among the cross-validated scores: the concern threshold needs them.")
    keep = ordinary | positive
    concern = min(crisis, threshold_for_fpr(oof[keep], positive[keep], concern_ordinary_max_fpr))
    context = min(concern, choose_threshold(oof, positive, context_recall))
    return {"crisis": crisis, "concern": concern, "context": context}


def config_dict(cfg: FitConfig) -> dict:
    return asdict(cfg)
