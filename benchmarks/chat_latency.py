"""Chat latency on the embedded model: time to first streamed token, decode tokens/s per speaker,
whole group-turn time; bf16 vs fp32. Targets (2-core CPU): first token <= 2 s, >= 15 tokens/s.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chat_latency.py [--dtypes bfloat16,float32] [--rounds 3]
        [--mode prompted] [--json benchmarks/results/chat_latency.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mascot.backends import GenerationParams
from mascot.backends.transformers_backend import TransformersBackend
from mascot.files.checkpoints import find_run
from mascot.group.chat import DirectiveEvent, GroupChat, TokenEvent, TurnEvent
from mascot.group.dialogue import Dialogue
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import load_pack

MESSAGES = [
    "I moved to a new city for work and I feel really lonely in the evenings.",
    "I failed my driving test for the second time and I feel like an idiot.",
    "My best friend forgot my birthday and I'm more hurt than I want to admit.",
    "I have a big presentation tomorrow and my heart is already racing.",
]


def raw_decode_rate(backend: TransformersBackend, n_tokens: int = 64) -> float:
    """Pure decode speed: tokens/s for a long greedy generation after a short prompt."""
    msgs = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    params = GenerationParams(max_new_tokens=n_tokens, temperature=0.0)
    backend.generate([msgs], params.with_(max_new_tokens=4))  # warm-up
    t = time.perf_counter()
    out = backend.generate([msgs], params)[0]
    return out.completion_tokens / (time.perf_counter() - t)


def group_turns(backend: TransformersBackend, mode: str, rounds: int, use_adapters: bool) -> dict[str, float]:
    pack = load_pack("emotional-support")
    first_token, per_speaker_tps, turn_time, speakers = [], [], [], []
    for r in range(rounds):
        group = GroupChat(backend, pack.active, mode=mode, use_adapters=use_adapters)
        d = Dialogue()
        t0 = time.perf_counter()
        got_first = False
        last_first = 0.0
        for e in group.respond(d, MESSAGES[r % len(MESSAGES)], seed=r):
            now = time.perf_counter()
            if isinstance(e, DirectiveEvent):
                last_first = 0.0
            elif isinstance(e, TokenEvent):
                if not got_first:
                    first_token.append(now - t0)
                    got_first = True
                if not last_first:
                    last_first = now
            elif isinstance(e, TurnEvent):
                n = backend.count_tokens(e.turn.text)
                if last_first and now > last_first and n > 4:
                    per_speaker_tps.append((n - 1) / (now - last_first))
                speakers.append(e.turn.speaker)
        turn_time.append(time.perf_counter() - t0)
    return {
        "first_token_s_median": statistics.median(first_token),
        "first_token_s_max": max(first_token),
        "speaker_tokens_per_s_median": statistics.median(per_speaker_tps) if per_speaker_tps else float("nan"),
        "group_turn_s_median": statistics.median(turn_time),
        "speakers_per_turn": len(speakers) / rounds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="prompted", help="director mode for the group turns")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    results = []
    for dtype in args.dtypes.split(","):
        backend = TransformersBackend("embedded", dtype=dtype)
        engine = Engine(EngineConfig(), backend, run_dir=find_run("checkpoints"))
        warnings = engine.attach_adapters(load_pack("emotional-support"))
        adapters = bool(backend.adapters) and not warnings
        raw = raw_decode_rate(backend)
        group_turns(backend, args.mode, 1, adapters)  # warm-up
        row = {"dtype": dtype, "adapters": adapters, "mode": args.mode, "raw_decode_tokens_per_s": raw,
               **group_turns(backend, args.mode, args.rounds, adapters)}
        results.append(row)
        del backend, engine
    cols = ["dtype", "adapters", "raw_decode_tokens_per_s", "first_token_s_median", "first_token_s_max",
            "speaker_tokens_per_s_median", "group_turn_s_median", "speakers_per_turn"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
