"""A second reward-model kind: a small Bradley-Terry head on the bundled sentence-embedding model.

The 135M LLM reward model (`rm_kind: llm`, the paper's design and the `paper-gpu` default) stays near
chance when trained on a few hundred CPU-sized pairs. This kind (`rm_kind: embedding`) scores
`(persona card, conversation, reply)` from frozen all-MiniLM-L6-v2 embeddings:

    x = [10 cos(r,p), 10 cos(r,c), r*p]    r, p, c = unit embeddings of reply, persona card, conversation
    r_phi = w . x + b                      (or an MLP with `hidden` units), Bradley-Terry loss

The explicit cosines carry the two signals that generalise from a few hundred pairs (fit to the
persona, relevance to the conversation); `r*p` lets the head weight the persona's own directions.
A larger feature set ([r, r*p, r*c, r-p]) with a 64-unit MLP reached 0.48-0.56 held-out accuracy on the
tiny-cpu pairs (train 0.9+: it memorised replies), hence this compact linear form.

It reads the same `rm_prompt(...)` text as the LLM reward model (the persona and the conversation are
split back out of it), so pairs, GRPO rewards and accuracy code are shared by both kinds. Training
takes seconds on CPU, so its learning rate and weight decay are chosen by a small sweep on a
validation split of the *training* contexts; held-out contexts are only used for the final accuracy.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mascot.errors import ConfigError

KIND_FILE = "reward_model.json"
WEIGHTS_FILE = "head.safetensors"
_PROMPT = re.compile(r"^Persona: (?P<persona>.*?)\n\nConversation:\n(?P<conv>.*)\n\nNext message from (?P<name>.*?):\n?$", re.S)


def split_rm_prompt(prompt: str) -> tuple[str, str]:
    """(persona card, conversation) from an `rm_prompt` text; other texts count as conversation only."""
    m = _PROMPT.match(prompt)
    if not m:
        return "", prompt
    return m["persona"].strip(), m["conv"].strip()


def _head(dim: int, hidden: int) -> Any:
    """The scoring head over `feature_size(dim)` features: linear when hidden == 0, else a 1-layer MLP."""
    import torch

    if hidden <= 0:
        return torch.nn.Linear(feature_size(dim), 1)
    return torch.nn.Sequential(torch.nn.Linear(feature_size(dim), hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))


def feature_size(dim: int) -> int:
    return dim + 2


def make_features(r: np.ndarray, p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """[10 cos(r,p), 10 cos(r,c), r*p] for unit vectors (the cosines scaled to the range of r*p sums)."""
    cos_p = (r * p).sum(axis=1, keepdims=True) * 10.0
    cos_c = (r * c).sum(axis=1, keepdims=True) * 10.0
    return np.concatenate([cos_p, cos_c, r * p], axis=1).astype(np.float32)


class EmbeddingRewardModel:
    """r_phi(persona, context, reply) = MLP over sentence-embedding features (see the module docstring)."""

    kind = "embedding"

    def __init__(self, head: Any, embedder: Any = None, meta: dict[str, Any] | None = None) -> None:
        self.head = head.eval()
        self._embedder = embedder
        self.meta = dict(meta or {})

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from mascot.judges.embedding import shared_embedder

            self._embedder = shared_embedder()
        return self._embedder

    def features(self, prompts: Sequence[str], responses: Sequence[str]) -> Any:
        import torch

        parts = [split_rm_prompt(p) for p in prompts]
        # the conversation's end matters most (the message being answered): keep its last 1,000 characters
        r = self.embedder.encode(list(responses))
        p = self.embedder.encode([a for a, _ in parts])
        c = self.embedder.encode([b[-1000:] for _, b in parts])
        return torch.from_numpy(make_features(r, p, c))

    def score_features(self, x: Any) -> list[float]:
        import torch

        with torch.inference_mode():
            return [float(v) for v in self.head(x)[:, 0]]

    def score_texts(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """r_phi for each (rm_prompt, response), same contract as `PersonaRewardModel.score_texts`."""
        if not prompts:
            return []
        return self.score_features(self.features(prompts, responses))

    # ---------------------------------------------------------------- files
    def save(self, target: Path) -> dict[str, int]:
        """Write head weights + metadata atomically (temp folder -> rename); returns file sizes."""
        import shutil

        from safetensors.torch import save_file

        target = Path(target)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(tmp / WEIGHTS_FILE))
        (tmp / KIND_FILE).write_text(json.dumps({"kind": self.kind, **self.meta}, indent=2), encoding="utf-8")
        (tmp / "README.md").write_text(
            "# Persona reward model (embedding kind)\n\nA Bradley-Terry MLP head on frozen all-MiniLM-L6-v2 "
            "embeddings of (reply, persona card, conversation); see `mascot/rewards/embedding_rm.py`.\n"
            f"Load with `mascot.rewards.embedding_rm.load_reward_model(base_model, '{target}')`.\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        return {f.name: f.stat().st_size for f in sorted(target.iterdir())}

    @classmethod
    def load(cls, folder: str | Path) -> EmbeddingRewardModel:
        from safetensors.torch import load_file

        folder = Path(folder)
        meta = json.loads((folder / KIND_FILE).read_text(encoding="utf-8"))
        head = _head(int(meta["dim"]), int(meta["hidden"]))
        head.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
        return cls(head, meta=meta)


def is_embedding_rm(folder: str | Path) -> bool:
    path = Path(folder) / KIND_FILE
    return path.exists() and json.loads(path.read_text(encoding="utf-8")).get("kind") == "embedding"


def load_reward_model(base_model: str, folder: str | Path, **kwargs: Any) -> Any:
    """The reward model saved in `folder`, whichever kind it is (embedding head or LLM LoRA adapter)."""
    folder = Path(folder)
    if is_embedding_rm(folder):
        return EmbeddingRewardModel.load(folder)
    if (folder / "adapter_config.json").exists():
        from mascot.rewards.persona_rm import PersonaRewardModel

        return PersonaRewardModel.load(base_model, folder, **kwargs)
    raise ConfigError(f"No reward model at {folder}: run the reward_model step first (--only reward_model).")


# ------------------------------------------------------------------- training
def _bt_fit(xc: Any, xr: Any, lr: float, weight_decay: float, epochs: int, hidden: int, seed: int,
            batch_size: int = 256) -> tuple[Any, list[float]]:
    """Bradley-Terry fit of a fresh head on chosen/rejected feature rows; returns (head, loss per epoch)."""
    import torch

    torch.manual_seed(seed)
    head = _head(xc.shape[1] - 2, hidden)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(xc), generator=gen)
        total = 0.0
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            loss = -torch.nn.functional.logsigmoid(head(xc[idx]) - head(xr[idx])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(order))
    return head.eval(), losses


def _acc(head: Any, xc: Any, xr: Any) -> float:
    import torch

    with torch.inference_mode():
        return float((head(xc) > head(xr)).float().mean())


def train_embedding_rm(train_pairs: list[dict[str, Any]], *, lrs: Sequence[float], weight_decays: Sequence[float],
                       epochs: int, hidden: int, seed: int, val_fraction: float = 0.2,
                       embedder: Any = None) -> tuple[EmbeddingRewardModel, dict[str, Any]]:
    """Sweep (lr, weight decay) on a validation split of the training groups, refit the best on all
    training pairs; returns the model and the sweep/fit metrics."""
    import torch

    if not train_pairs:
        raise ConfigError("No training pairs for the embedding reward model: lower --delta or add contexts.")
    t0 = time.time()
    probe = EmbeddingRewardModel(_head(1, 0), embedder)
    xc = probe.features([p["prompt"] for p in train_pairs], [p["chosen"] for p in train_pairs])
    xr = probe.features([p["prompt"] for p in train_pairs], [p["rejected"] for p in train_pairs])
    # validation split by scenario (whole contexts), like the held-out split
    scen = sorted({str(p.get("group_id") or i).split(":")[0] for i, p in enumerate(train_pairs)})
    random.Random(seed + 7).shuffle(scen)
    val_scen = set(scen[: max(1, int(round(len(scen) * val_fraction)))])
    is_val = torch.tensor([str(p.get("group_id") or i).split(":")[0] in val_scen for i, p in enumerate(train_pairs)])
    sweep = []
    for lr in lrs:
        for wd in weight_decays:
            head, losses = _bt_fit(xc[~is_val], xr[~is_val], lr, wd, epochs, hidden, seed)
            sweep.append({"lr": lr, "weight_decay": wd, "val_accuracy": round(_acc(head, xc[is_val], xr[is_val]), 4),
                          "train_accuracy": round(_acc(head, xc[~is_val], xr[~is_val]), 4), "last_loss": round(losses[-1], 4)})
    best = max(sweep, key=lambda s: (s["val_accuracy"], -s["last_loss"]))
    head, losses = _bt_fit(xc, xr, best["lr"], best["weight_decay"], epochs, hidden, seed)
    with torch.inference_mode():
        train_scores = torch.cat([head(xc), head(xr)])[:, 0]
    meta = {"dim": int(xc.shape[1] - 2), "hidden": hidden, "features": "10cos(r,p), 10cos(r,c), r*p", "lr": best["lr"], "weight_decay": best["weight_decay"],
            "epochs": epochs, "score_mean": float(train_scores.mean()), "score_std": float(train_scores.std()),
            "embedding_model": "all-MiniLM-L6-v2"}
    model = EmbeddingRewardModel(head, embedder, meta)
    metrics = {"sweep": sweep, "chosen": {"lr": best["lr"], "weight_decay": best["weight_decay"]},
               "val_contexts": len(val_scen), "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
               "train_accuracy": round(_acc(head, xc, xr), 4), "epochs": epochs,
               "params": {"trainable": sum(p.numel() for p in head.parameters())},
               "seconds": round(time.time() - t0, 1)}
    return model, metrics
