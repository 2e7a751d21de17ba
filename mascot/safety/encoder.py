"""The crisis classifiers' sentence encoder at run time: a BERT forward pass in numpy, mean-pooled.

Why numpy: the chat checks every message and reply with small encoders (all-MiniLM-L6-v2: 6 layers, hidden 384,
12 heads), and importing torch and transformers to run them costs seconds at each start; numpy and the Rust
`tokenizers` library load in a fraction of that, and a forward pass of a few short texts is a handful of
matrix products either way. Training (`mascot.safety.training`) keeps torch and peft; the weights read here
are the encoder with a classifier's LoRA merged in (`mascot.safety.classifier.merged_weights`).

The pass is the transformers `BertModel` in float32: word + position + token-type-0 embeddings and LayerNorm;
per layer self-attention (padded keys masked out), output dense + residual + LayerNorm, intermediate dense +
exact GELU, output dense + residual + LayerNorm; sizes, epsilon and activation from the model's config.json.
The tokenizer is the model's tokenizer.json, truncating and padding as the transformers tokenizer does.
`tests/test_safety_runtime.py` checks token ids and pooled embeddings against transformers (max difference
under 1e-4) and the classifiers' tiers against the torch path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mascot.errors import ConfigError

BATCH = 64  # texts per forward pass: bounds the attention scores' memory on long lists
# One BLAS thread per pass, as torch ran the classifiers beside llama.cpp (docs/performance.md): on a small shared
# CPU a second thread waits on cores that the chat's model or another process holds (three texts on a busy
# two-core machine: median 0.7 s on two threads, 0.06 s on one). The limit is process-wide, so passes take turns.
BLAS_THREADS = 1
_BLAS_LOCK = threading.Lock()

# erf as a rational function of x on [-4, 4] (outside it erf is +-1 in float32), the float32 approximation of
# XLA and Eigen: 7e-8 from erf in exact arithmetic, 4.5e-7 at most in float32 (against math.erf on 2M points)
_ERF_ALPHA = np.array([-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                       -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02], np.float32)
_ERF_BETA = np.array([-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                      -1.42647390514189e-02], np.float32)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float32 (numpy has none; scipy's would cost its import)."""
    x = np.clip(x, np.float32(-4.0), np.float32(4.0))
    x2 = x * x
    p = np.full_like(x, _ERF_ALPHA[0])
    for c in _ERF_ALPHA[1:]:
        p *= x2
        p += c
    q = np.full_like(x, _ERF_BETA[0])
    for c in _ERF_BETA[1:]:
        q *= x2
        q += c
    return x * p / q


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, x * Phi(x), as transformers' "gelu"."""
    return x * np.float32(0.5) * (np.float32(1.0) + erf(x * np.float32(0.7071067811865476)))


ACTIVATIONS = {"gelu": gelu}


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps)) * weight + bias


def load_tokenizer(model_dir: Path, max_tokens: int):  # type: ignore[no-untyped-def]
    """The model's fast tokenizer: truncated to `max_tokens`, a batch padded to its longest text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(max_length=max_tokens)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tok


class _Layer:
    """One transformer layer's weights, laid out for `x @ w` (transposed once at load)."""

    def __init__(self, w: dict[str, np.ndarray], prefix: str) -> None:
        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[f"{prefix}.{name}"], np.float32)

        att = "attention.self"
        self.qkv = np.ascontiguousarray(np.concatenate([get(f"{att}.{p}.weight") for p in ("query", "key", "value")]).T)
        self.qkv_bias = np.concatenate([get(f"{att}.{p}.bias") for p in ("query", "key", "value")])
        self.att_out, self.att_out_bias = np.ascontiguousarray(get("attention.output.dense.weight").T), get("attention.output.dense.bias")
        self.att_norm = get("attention.output.LayerNorm.weight"), get("attention.output.LayerNorm.bias")
        self.up, self.up_bias = np.ascontiguousarray(get("intermediate.dense.weight").T), get("intermediate.dense.bias")
        self.down, self.down_bias = np.ascontiguousarray(get("output.dense.weight").T), get("output.dense.bias")
        self.out_norm = get("output.LayerNorm.weight"), get("output.LayerNorm.bias")


class BertEncoder:
    """Texts -> mean-pooled last hidden states (float32, one row per text)."""

    def __init__(self, model_dir: Path, weights: dict[str, np.ndarray], max_tokens: int) -> None:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        act = config.get("hidden_act", "gelu")
        if act not in ACTIVATIONS or config.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(f"{model_dir} is not a BERT encoder this runtime reads (activation {act!r}, "
                              f"position embeddings {config.get('position_embedding_type')!r}): use all-MiniLM-L6-v2.")
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.act = ACTIVATIONS[act]
        try:
            self.word = weights["embeddings.word_embeddings.weight"]
            self.position = weights["embeddings.position_embeddings.weight"]
            self.token_type0 = weights["embeddings.token_type_embeddings.weight"][0]
            self.emb_norm = weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"]
            self.layers = [_Layer(weights, f"encoder.layer.{i}") for i in range(int(config["num_hidden_layers"]))]
        except KeyError as exc:
            raise ConfigError(f"The encoder weights lack {exc}: delete the cached merged encoder to rebuild it.") from None
        self.tokenizer = load_tokenizer(model_dir, max_tokens)
        from threadpoolctl import ThreadpoolController

        self._blas = ThreadpoolController().select(user_api="blas")

    @classmethod
    def load(cls, model_dir: Path, weights_file: Path, max_tokens: int) -> BertEncoder:
        """The encoder of `model_dir` (config, tokenizer) with the weights in `weights_file` (a BertModel's
        state dict as safetensors)."""
        from safetensors.numpy import load_file

        return cls(model_dir, load_file(str(weights_file)), max_tokens)

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask, (texts, longest) int64 each."""
        enc = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], np.int64)
        mask = np.array([e.attention_mask for e in enc], np.int64)
        return ids, mask

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The mean of the last hidden states over each text's tokens, (texts, hidden) float32."""
        out = np.zeros((len(texts), self.hidden), np.float32)
        with _BLAS_LOCK, self._blas.limit(limits=BLAS_THREADS):
            for start in range(0, len(texts), BATCH):
                ids, mask = self.tokenize(texts[start : start + BATCH])
                states = self.forward(ids, mask)
                m = mask[..., None].astype(np.float32)
                out[start : start + len(ids)] = (states * m).sum(1) / np.maximum(m.sum(1), np.float32(1.0))
        return out

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The last hidden states, (batch, tokens, hidden) float32."""
        b, n = ids.shape
        h, heads = self.hidden, self.heads
        d = h // heads
        x = self.word[ids] + self.position[:n] + self.token_type0
        x = layer_norm(x.reshape(b * n, h), *self.emb_norm, self.eps)
        key_bias = np.where(mask[:, None, None, :] > 0, np.float32(0.0), np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(d))
        for layer in self.layers:
            qkv = (x @ layer.qkv + layer.qkv_bias).reshape(b, n, 3, heads, d).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # (batch, heads, tokens, head size)
            scores = (q * scale) @ k.transpose(0, 1, 3, 2) + key_bias
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(b * n, h)
            x = layer_norm(context @ layer.att_out + layer.att_out_bias + x, *layer.att_norm, self.eps)
            up = self.act(x @ layer.up + layer.up_bias)
            x = layer_norm(up @ layer.down + layer.down_bias + x, *layer.out_norm, self.eps)
        return x.reshape(b, n, h)
