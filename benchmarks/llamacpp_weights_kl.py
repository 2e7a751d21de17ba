"""How far each llama.cpp weight format moves the embedded model from its own Q4_1 file.

The backend serves re-encoded weights for prompts, batches and scoring (`MASCOT_LLAMACPP_WEIGHTS`: `auto` picks
`bf16` on CPUs with AVX512-BF16, else `q8_0`). A format is only worth its speed if the model keeps predicting
as the shipped file does. For 8 speaker prompts over bundled scenarios, each with a fixed opening of an
assistant reply prefilled, this reads the next-token distribution at the last 60 positions under the file
(`native`) and under each format, and reports the mean, 95th percentile and maximum KL(native || format) in
nats and how often the greedy token agrees.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llamacpp_weights_kl.py [--weights q8_0,bf16,f32]

Measured on AMD EPYC, 2 cores (benchmarks/results/llamacpp_weights_kl.json): q8_0 mean 0.0046
(greedy agreement 0.963), bf16 0.0025 (0.975), f32 0.0024 (0.971).

`--requantized q4_0` also measures a 4-bit re-encoding the backend does not serve: this llama.cpp build's
repacked x86 matrix kernels, which batch rows far better, exist only for Q4_0, IQ4_NL and MXFP4 weights, and
the shipped Q4_1 file can reach them only by quantising a second time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

REPLY = "I hear you, and it sounds like this week has been really heavy for you. Tell me more about what happened."


def log_probs(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64) - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def positions(weights: str, chats: list, last: int, cache_dir: str, model: str = "embedded") -> np.ndarray:
    """Log-probabilities at the last `last` positions of every chat, stacked."""
    from mascot.backends.base import GenerationParams
    from mascot.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(model, n_ctx=1024, n_seq=1, threads=2, weights=weights, decode_weights="same",
                              cache_dir=cache_dir)
    params = GenerationParams(max_new_tokens=1, prefill=REPLY)
    return np.concatenate([log_probs(backend.logits(chat, params)[-last:]) for chat in chats])


def requantized(target: str, cache_dir: str) -> Path:
    """The embedded GGUF with every Q4_1/Q8_0 weight de-quantised and quantised again as `target` (written once)."""
    import gguf

    from mascot.backends.llamacpp.recode import write_gguf
    from mascot.files.model_files import embedded_gguf

    src = embedded_gguf()
    kind = gguf.GGMLQuantizationType[target.upper()]
    out = Path(cache_dir) / "gguf-recode" / f"{src.stem}-requantized-{target}.gguf"
    if not out.exists():
        def convert(t):  # type: ignore[no-untyped-def]
            if t.tensor_type.name in ("Q4_1", "Q8_0"):
                return gguf.quants.quantize(gguf.quants.dequantize(t.data, t.tensor_type), kind), kind
            return t.data, t.tensor_type

        write_gguf(gguf.GGUFReader(str(src)), out, convert)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default="q8_0,bf16,f32")
    ap.add_argument("--requantized", default="", help="also formats reached only by quantising again, e.g. q4_0")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--last", type=int, default=60, help="positions read at the end of each prompt")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    from mascot.backends.llamacpp.runtime import import_llama_cpp
    from mascot.settings import Settings, apply_process_defaults

    settings = Settings.from_env()
    apply_process_defaults()
    import_llama_cpp(settings.llamacpp_omp_wait_policy)
    from llamacpp_speed import speaker_prompts

    chats = [c for _, c in speaker_prompts(args.prompts, "anchor")]
    ref = positions("native", chats, args.last, settings.cache_dir)
    rows = {}
    served = [(w, w, "embedded") for w in args.weights.split(",") if w.strip()]
    again = [(f"{w} (requantized)", "native", str(requantized(w, settings.cache_dir)))
             for w in args.requantized.split(",") if w.strip()]
    for name, w, model in [(n.strip(), w.strip(), m) for n, w, m in served + again]:
        lp = positions(w, chats, args.last, settings.cache_dir, model)
        kl = (np.exp(ref) * (ref - lp)).sum(-1)
        rows[name] = {"kl_mean": float(kl.mean()), "kl_p95": float(np.quantile(kl, 0.95)), "kl_max": float(kl.max()),
                   "greedy_agreement": float((ref.argmax(-1) == lp.argmax(-1)).mean()), "positions": int(len(kl))}
    print("| weights | mean KL vs Q4_1 file (nats) | p95 | max | greedy-token agreement | positions |\n|---|---|---|---|---|---|")
    for w, r in rows.items():
        print(f"| {w} | {r['kl_mean']:.4f} | {r['kl_p95']:.4f} | {r['kl_max']:.3f} | {r['greedy_agreement']:.3f} | {r['positions']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
