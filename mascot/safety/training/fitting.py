"""Fitting the crisis classifiers: the bundled encoder's top layers adapted through a LoRA, with a logistic head.

A frozen embedding with a linear head could not separate crisis messages from hard negatives (at 98% recall it
flagged about half of them, docs/safety.md), so the top layers are adapted. Fitting caches the frozen lower
layers once and runs only the adapted ones, which keeps a full cross-validated fit within minutes on a CPU.
`save` writes what `mascot.safety.classifier.Classifier` loads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mascot.safety.classifier import HIDDEN, MAX_TOKENS, MODEL_DIR, NUM_LAYERS, mean_pool, tokenizer_and_encoder
from mascot.safety.training.augment import augment

log = logging.getLogger(__name__)


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


def _lora_config(cfg: FitConfig):  # type: ignore[no-untyped-def]
    from peft import LoraConfig

    first = NUM_LAYERS - cfg.layers
    return LoraConfig(r=cfg.rank, lora_alpha=2 * cfg.rank, lora_dropout=0.1, target_modules=["query", "key", "value", "dense"],
                      layers_to_transform=list(range(first, NUM_LAYERS)), layers_pattern="layer")


class Fitter:
    """Fine-tunes classifiers over one cached pass of the frozen lower layers."""

    def __init__(self, texts: Sequence[str], cfg: FitConfig) -> None:
        import torch

        self.cfg = cfg
        self.tokenizer, base = tokenizer_and_encoder()
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
        return head(mean_pool(x, mask)).squeeze(-1)

    def fit(self, train: Sequence[int], labels: Sequence[bool]):  # type: ignore[no-untyped-def]
        """Train on the examples `train` (indices into the cached texts); returns (peft model, head)."""
        import torch
        from peft import get_peft_model

        torch.manual_seed(self.cfg.seed)
        _, base = tokenizer_and_encoder()
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


def config_dict(cfg: FitConfig) -> dict:
    """The fitting options as saved in a classifier's metadata."""
    return asdict(cfg)
