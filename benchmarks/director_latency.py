"""Director decision time on CPU, per decision: the trained director (constrained speaker scoring, then the
action and tone: chosen from the persona's menu by scoring, the chat's default; or written as free text) against the prompted director and the rule-based ones, on held-out dialogue states
(the test seeker scripts' openings, and the same after one persona replied). The first decision of a round
is added in full to the first token of the chat turn; the target is <= 0.5 s added.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/director_latency.py [--backend auto] [--run tiny-cpu] [--limit 12] [--threads 1]
        [--details choose,generate,default] [--json benchmarks/results/director_latency.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from mascot.backends import load_backend
from mascot.files.model_files import use_cache_dir
from mascot.group.dialogue import Turn
from mascot.group.director import DirectorState, make_director
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import load_pack
from mascot.settings import Settings, apply_process_defaults
from mascot.simusers import load_scripts


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="tiny-cpu")
    ap.add_argument("--limit", type=int, default=12, help="held-out scripts (2 states each)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the transformers backend)")
    ap.add_argument("--backend", default="auto", help="auto (llamacpp on CPU, as the chat) | transformers | ...")
    ap.add_argument("--details", default="choose,generate,default",
                    help="how the LLM directors fill the action and tone (each measured): choose | generate | default")
    ap.add_argument("--modes", default="trained,prompted,round-robin,random")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    settings = Settings.from_env()
    apply_process_defaults()
    use_cache_dir(settings.cache_dir)
    pack = load_pack("emotional-support")
    # before torch: llama.cpp's OpenMP keeps its own policy
    backend = load_backend(args.backend, **{**settings.backend_options(), "model": "embedded"})
    import torch

    torch.set_num_threads(args.threads)
    engine = Engine(EngineConfig(), backend, run_dir=Path("checkpoints") / args.run)
    engine.attach_adapters(pack)
    states = []
    for s in load_scripts("bundled", "test", args.limit):
        d = s.opening_dialogue()
        states.append(DirectorState(d, pack.active, 0))
        d2 = s.opening_dialogue()
        d2.add(Turn("Anchor", "That sounds really hard, and it makes sense you feel this way."))
        states.append(DirectorState(d2, pack.active, 0))
    results: dict[str, object] = {"run": args.run, "states": len(states), "threads": args.threads,
                                  "loadavg_1min": round(os.getloadavg()[0], 2), "adapters": sorted(backend.adapters),
                                  "backend": f"{backend.info().kind}: {backend.info().model}", "modes": {}}
    runs = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        llm = mode in ("trained", "prompted")
        runs += [(mode, d) for d in args.details.split(",")] if llm else [(mode, None)]
    for mode, details in runs:
        director = make_director(mode, backend)
        if details:
            director.details = details  # type: ignore[attr-defined]
        director.decide(states[0])  # warm-up
        times, first = [], []
        for i, st in enumerate(states):
            t = time.perf_counter()
            director.decide(st)
            dt = time.perf_counter() - t
            times.append(dt)
            if i % 2 == 0:
                first.append(dt)
        row = {"median_s": round(statistics.median(times), 3), "p95_s": round(pct(times, 0.95), 3),
               "first_decision_median_s": round(statistics.median(first), 3), "first_decision_p95_s": round(pct(first, 0.95), 3),
               "n": len(times)}
        label = f"{mode} ({details})" if details else mode
        results["modes"][label] = row  # type: ignore[index]
        print(f"{label:<22} per decision median {row['median_s']:.3f} s, p95 {row['p95_s']:.3f} s; "
              f"added to first token median {row['first_decision_median_s']:.3f} s, p95 {row['first_decision_p95_s']:.3f} s")
    results["loadavg_1min_after"] = round(os.getloadavg()[0], 2)
    print(f"(1-min load average {results['loadavg_1min']} -> {results['loadavg_1min_after']}; {args.threads} torch thread(s))")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
