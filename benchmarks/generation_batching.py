"""Batched vs one-at-a-time candidate generation on CPU with the embedded model (README, Performance).

The same speaker prompts (bundled training scenarios x personas, built by mascot.group.prompts exactly as
stage-1 candidate generation builds them) are generated once per batch size through the shared
TransformersBackend, and candidates/second are compared. Two modes:

- fixed:  every candidate gets exactly --max-new-tokens tokens (min_new_tokens = max_new_tokens, no
          stop strings), so each batch size does the same work: the pure effect of batching.
- engine: the live speaker settings (sampling, stop strings, EOS); candidates stop when they are
          done, so a batch waits for its longest member: what training actually sees.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generation_batching.py --json runs/bench/batching.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from mascot.files.model_files import use_cache_dir
from mascot.settings import Settings, apply_process_defaults

# On a shared CPU, OpenMP threads that spin-wait for a descheduled sibling make every decode step
# 20-60x slower (measured here: 35 ms -> 2.3 s per step). Passive waiting removes that collapse; it
# must be set before torch starts its thread pool.
apply_process_defaults()

import torch  # noqa: E402

from mascot.backends.base import GenerationParams, Messages  # noqa: E402
from mascot.backends.transformers_backend import TransformersBackend  # noqa: E402
from mascot.data import load_scenarios  # noqa: E402
from mascot.group.personas import load_pack  # noqa: E402
from mascot.group.prompts import speaker_messages  # noqa: E402
from mascot.group.speaker import Speaker  # noqa: E402


def build_prompts(n: int, pack_name: str) -> list[Messages]:
    """n speaker chats: bundled training scenarios x active personas, in a fixed order."""
    pack = load_pack(pack_name)
    scenarios = [s for s in load_scenarios("bundled", split="train") if s.setting == pack.setting]
    chats = [speaker_messages(p, pack.active, s.to_dialogue()) for s in scenarios for p in pack.active]
    assert len(chats) >= n, f"only {len(chats)} prompts available, asked for {n}"
    return chats[:n]


def generate_fixed(backend: TransformersBackend, batch: list[Messages], params: GenerationParams) -> int:
    """Exactly max_new_tokens per row: the engine's own encoding and kwargs plus min_new_tokens."""
    kwargs = backend._gen_kwargs(params)
    kwargs["min_new_tokens"] = params.max_new_tokens
    with torch.inference_mode():
        enc = backend._encode(batch, params)
        out = backend.model.generate(**enc, **kwargs)
    return int(out.shape[0] * (out.shape[1] - enc["input_ids"].shape[1]))


def generate_engine(backend: TransformersBackend, batch: list[Messages], params: GenerationParams) -> int:
    return sum(c.completion_tokens for c in backend.generate(batch, params))


def run(backend: TransformersBackend, prompts: list[Messages], batch_size: int, mode: str, params: GenerationParams) -> dict[str, Any]:
    fn = generate_fixed if mode == "fixed" else generate_engine
    tokens, t0 = 0, time.perf_counter()
    for start in range(0, len(prompts), batch_size):
        tokens += fn(backend, prompts[start : start + batch_size], params.with_(seed=start))
    dt = time.perf_counter() - t0
    return {"mode": mode, "batch_size": batch_size, "candidates": len(prompts), "seconds": round(dt, 2),
            "candidates_per_s": round(len(prompts) / dt, 3), "new_tokens": tokens, "tokens_per_s": round(tokens / dt, 1)}


def cpu_pressure() -> str:
    """The kernel's CPU pressure line (how much other work competed for the cores), if available."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "unavailable"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-prompts", type=int, default=32, help="candidates generated per setting (default: %(default)s)")
    ap.add_argument("--batch-sizes", default="1,8,16", help="comma-separated; 1 = one at a time (default: %(default)s)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="token budget per candidate (default: %(default)s)")
    ap.add_argument("--modes", default="fixed,engine", help="fixed, engine or both (default: %(default)s)")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--dtype", default="auto", help="auto = bf16 on CPU (the engine's default)")
    ap.add_argument("--pack", default="emotional-support")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args()
    use_cache_dir(Settings.from_env().cache_dir)  # where the embedded model's transformers copy is kept
    if args.threads:
        torch.set_num_threads(args.threads)

    backend = TransformersBackend(model=args.model, dtype=args.dtype, device="cpu")
    prompts = build_prompts(args.n_prompts, args.pack)
    speaker = Speaker(backend).params.with_(max_new_tokens=args.max_new_tokens)
    fixed = speaker.with_(stop=())
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    modes = [m.strip() for m in args.modes.split(",")]
    pressure_before = cpu_pressure()
    generate_engine(backend, prompts[:2], speaker)  # warm-up: first-call allocations, stop-string tables
    rows = []
    for mode in modes:
        for b in sizes:
            row = run(backend, prompts, b, mode, fixed if mode == "fixed" else speaker)
            rows.append(row)
            print(f"  {mode:6s} batch {b:>2}: {row['candidates_per_s']:.2f} cand/s  {row['tokens_per_s']:.1f} tok/s  ({row['seconds']} s)", flush=True)
    for row in rows:
        base = next(r for r in rows if r["mode"] == row["mode"] and r["batch_size"] == min(sizes))
        row["speedup"] = round(row["candidates_per_s"] / base["candidates_per_s"], 2)

    info = backend.info()
    print(f"\nModel {info.model} ({info.dtype}, {info.device}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.n_prompts} candidates, max_new_tokens={args.max_new_tokens}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"| mode | batch | candidates/s | new tokens/s | seconds | speed-up vs batch {min(sizes)} |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['batch_size']} | {r['candidates_per_s']:.2f} | {r['tokens_per_s']:.1f} | {r['seconds']:.1f} | {r['speedup']:.2f}x |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = {"model": info.model, "dtype": info.dtype, "device": info.device, "torch": torch.__version__,
                "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
                "n_prompts": args.n_prompts, "max_new_tokens": args.max_new_tokens,
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "cpu_pressure_before": pressure_before,
                "cpu_pressure_after": cpu_pressure()}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
