"""The crisis classifiers' run-time path (numpy encoder, hashed n-grams without scikit-learn) computes what
training's torch, transformers and scikit-learn compute, and the chat's scoring imports none of them."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mascot.safety.classifier import read_meta
from mascot.safety.encoder import erf, gelu
from mascot.safety.lexical import LexicalModel, char_wb_ngrams, murmurhash3_32, word_ngrams

DATA = Path(__file__).resolve().parents[1] / "mascot" / "data" / "safety"
CHUNK = 16  # texts per forward pass in the comparisons: lines sorted by length pad little
HEAVY = ("torch", "transformers", "peft", "scipy", "sklearn")
EDGE = ["", "   ", "a", "x" * 2000, " ".join(["word"] * 300), "  Hello\t\tWORLD  \n x ", "I'd  kill   for a coffee",
        "ÀÉÎ straße İstanbul 日本語", "😭😭😭 🔪🩸", "don't—stop_now 42 a1 b", "\x00\x01\x02\xff" * 50]


def data_lines(every: int = 32) -> list[str]:
    """Every `every`-th text line of the shipped safety data (about 200 lines), then edge cases."""
    lines = [line.strip() for path in sorted(DATA.glob("*.txt")) for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    return lines[::every] + EDGE


def test_erf_and_gelu_are_float32_accurate():
    x = np.linspace(-6, 6, 200_001).astype(np.float32)
    exact = np.array([math.erf(float(v)) for v in x])
    assert np.abs(erf(x) - exact).max() < 5e-7
    phi = np.array([0.5 * (1 + math.erf(float(v) / math.sqrt(2))) for v in x])
    assert np.abs(gelu(x) - x * phi).max() < 2e-6
    assert erf(x).dtype == gelu(x).dtype == np.float32


def test_hashing_and_analyzers_match_scikit_learn():
    from sklearn.utils import murmurhash3_32 as reference

    from mascot.safety.lexical import _vectorizers

    rng = random.Random(0)
    lines = data_lines(every=4)
    keys = sorted({g for t in lines for g in char_wb_ngrams(t) + word_ngrams(t)} | set(lines))
    keys += ["".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(0, 40))) for _ in range(2000)]
    raw = [k.encode("utf-8") for k in keys]
    assert murmurhash3_32(raw).tolist() == [reference(k, seed=0, positive=False) for k in raw]
    assert murmurhash3_32([]).shape == (0,)
    chars, words = (v.build_analyzer() for v in _vectorizers())
    for text in lines:
        assert char_wb_ngrams(text) == chars(text) and sorted(word_ngrams(text)) == sorted(words(text)), text


def test_lexical_logits_match_scikit_learn():
    from mascot.safety.classifier import MODEL_DIR
    from mascot.safety.lexical import _counts, _tfidf

    model = LexicalModel.load(MODEL_DIR / "messages")
    assert model is not None
    texts = data_lines()
    ref = _tfidf(_counts(texts), model.idf.astype(np.float64)) @ model.coef.astype(np.float64) + model.intercept
    ours = model.exact_logits(texts)
    assert np.abs(ours - ref).max() < 1e-9
    assert np.array_equal(model.logits(texts), ref.astype(np.float32))
    assert model.exact_logits([]).shape == (0,)


def reference_scores(name: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pooled embeddings and classifier scores computed by torch, transformers and scikit-learn."""
    import torch
    from safetensors.torch import load_file

    from mascot.safety.classifier import MAX_TOKENS, MODEL_DIR, mean_pool, merged_weights, tokenizer_and_encoder
    from mascot.safety.lexical import _counts, _tfidf, combine

    meta = read_meta(name)
    tokenizer, encoder = tokenizer_and_encoder()
    encoder.load_state_dict(load_file(str(merged_weights(MODEL_DIR / name))))
    encoder.eval()
    pooled = []
    with torch.inference_mode():
        for start in range(0, len(texts), CHUNK):
            b = tokenizer(texts[start : start + CHUNK], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            pooled.append(mean_pool(encoder(**b).last_hidden_state, b["attention_mask"]))
        pooled = torch.cat(pooled)
        scores = torch.sigmoid(pooled @ torch.tensor(meta["head"]["weight"]) + float(meta["head"]["bias"])).numpy()
    lexical = LexicalModel.load(MODEL_DIR / name)
    if lexical is not None:
        z = _tfidf(_counts(texts), lexical.idf.astype(np.float64)) @ lexical.coef.astype(np.float64) + lexical.intercept
        scores = combine(scores, 1.0 / (1.0 + np.exp(-np.asarray(z, np.float32))), float(meta["lexical_weight"]))
    return pooled.numpy(), scores


@pytest.mark.model
@pytest.mark.parametrize("name", ["messages", "replies"])
def test_numpy_classifier_matches_torch_path(name):
    from transformers import AutoTokenizer

    from mascot.files.model_files import embedding_model_dir
    from mascot.safety.classifier import MAX_TOKENS, Classifier
    from mascot.safety.detector import SHORT_CONCERN

    texts = sorted((t for t in data_lines() if t.strip()), key=len)  # empty texts score 0 without encoding them
    classifier = Classifier(name)
    ids, mask = classifier.encoder.tokenize(texts)  # padded to the longest text, truncated to MAX_TOKENS
    ref = AutoTokenizer.from_pretrained(embedding_model_dir())(texts, padding=True, truncation=True, max_length=MAX_TOKENS)
    assert ids.tolist() == ref["input_ids"] and mask.tolist() == ref["attention_mask"] and ids.shape[1] == MAX_TOKENS
    pooled, ref_scores = reference_scores(name, texts)
    chunks = [texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)]
    assert np.abs(np.concatenate([classifier.encoder.embed(c) for c in chunks]) - pooled).max() < 1e-4
    scores = np.concatenate([classifier.score(c) for c in chunks])
    assert np.abs(scores - ref_scores).max() < 1e-5
    for threshold in [*classifier.meta["thresholds"].values(), SHORT_CONCERN]:  # every tier boundary
        assert ((scores >= threshold) == (ref_scores >= threshold)).all(), threshold


@pytest.mark.model  # loads the real weights (the merged encoders are built here when missing)
def test_scoring_imports_no_torch_transformers_or_scikit_learn():
    from mascot.safety.classifier import MODEL_DIR, merged_weights

    for name in ("messages", "replies"):
        merged_weights(MODEL_DIR / name)
    code = ("import sys\n"
            "from mascot.safety.detector import CrisisDetector\n"
            "d = CrisisDetector.load()\n"
            "assert d.check('i want to end it all tonight', ['I cannot go on'], record=False).tier == 'crisis'\n"
            "d.check_reply('Talking to someone you trust can help.', record=False)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
