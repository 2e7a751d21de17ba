"""What one llama.cpp decode call costs by the number of tokens in it, for each weight format the backend serves
(the embedded Q4_1 file, and the Q8_0 and bf16 re-encodings in the model cache), after a 200-token context.

It shows where the chat's first token and batched sampling hit the CPU kernels: a trained-director decision is
three scoring decodes of about 30-70 tokens, a speaker's first token a prefill of about 30-70 more, and a batched
sampling step one decode of N rows. A call of n tokens costing far more than n/128 of a 128-token call is the
small-batch overhead those paths pay.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llamacpp_batch_sizes.py [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (1, 8, 16, 24, 32, 48, 64, 96, 128)
CONTEXT = 200


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per size (the median is reported)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1.")
    from mascot.backends.llamacpp.calibrate import machine
    from mascot.backends.llamacpp.recode import recoded_path
    from mascot.backends.llamacpp.runtime import import_llama_cpp
    from mascot.files.model_files import embedded_gguf

    ll = import_llama_cpp("")
    native = embedded_gguf()
    files = {"native": native}
    for fmt in ("q8_0", "bf16"):
        path = recoded_path(native, fmt)
        if path.exists():
            files[fmt] = path
        else:
            print(f"{fmt}: no re-encoding in the model cache yet (the backend writes it at its first load); skipped")
    rows: dict[str, dict[str, float]] = {}
    for fmt, path in files.items():
        model = ll.Llama(str(path), n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=args.threads,
                         n_threads_batch=args.threads, flash_attn=True, verbose=False)
        tokens = (model.tokenize(b"hello " * (CONTEXT + max(SIZES))) * 2)[: CONTEXT + max(SIZES)]
        rows[fmt] = {}
        for n in SIZES:
            times = []
            for _ in range(args.repeats):
                model.reset()
                model.eval(tokens[:CONTEXT])
                start = time.perf_counter()
                model.eval(tokens[CONTEXT : CONTEXT + n])
                times.append(time.perf_counter() - start)
            rows[fmt][str(n)] = statistics.median(times) * 1000
        print(f"{fmt:7}" + "".join(f"  {n}: {rows[fmt][str(n)]:.1f} ms" for n in SIZES), flush=True)
        del model
    out = {"machine": machine(), "threads": args.threads, "context_tokens": CONTEXT, "repeats": args.repeats,
           "ms_per_call": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
