"""Time of a three-speaker chat turn on llama.cpp with fast replies (the first draw) and careful ones (best of N
by the acceptability scorer), as the app runs them: the engine with the trained director, warmed up, streaming.
Reports time to the first visible text and to the end of the turn, and the scorer's mean acceptability of what
was shown (on openings the scorer never saw: `mascot/data/fresh2`).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/careful_replies.py --best-of 1,2,3 --messages 8 \\
        --json benchmarks/results/careful_replies.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from mascot.data import load_scenarios
from mascot.group.chat import TokenEvent, TurnEvent
from mascot.group.dialogue import Dialogue
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import load_pack

ROOT = Path(__file__).resolve().parents[1]


def run(engine: Engine, pack, best_of: int, messages: list[str], stems: bool) -> dict:  # type: ignore[no-untyped-def]
    engine.careful_best_of = best_of
    group = engine.group(pack.active, "trained", replies="careful" if best_of > 1 else "fast", stems=stems)
    first, total, accept, flagged = [], [], [], 0
    selector = engine.selector()[0]
    scorer = selector.scorer if selector is not None else None
    for k, text in enumerate(messages):
        d = Dialogue()
        t0 = time.perf_counter()
        seen = False
        for e in group.respond(d, text, seed=k):
            if isinstance(e, TokenEvent) and not seen and e.text.strip():
                first.append(time.perf_counter() - t0)
                seen = True
            if isinstance(e, TurnEvent):
                flagged += bool((e.turn.meta.get("selection") or {}).get("all_flagged"))
        total.append(time.perf_counter() - t0)
        if scorer is not None:
            for i, t in enumerate(d.turns):
                if not t.is_user and t.speaker in {p.name for p in pack.personas}:
                    accept.append(scorer.score(Dialogue(d.turns[:i]), t.speaker, [t.text])[0].acceptability)
    return {"best_of": best_of, "stems": stems, "messages": len(messages),
            "first_text_s": {"median": round(statistics.median(first), 2), "max": round(max(first), 2)},
            "turn_s": {"median": round(statistics.median(total), 2), "max": round(max(total), 2)},
            "mean_acceptability": round(statistics.mean(accept), 3) if accept else None, "all_flagged_turns": flagged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--best-of", default="1,2,3", help="comma-separated N (1 = fast replies)")
    ap.add_argument("--stems", action="store_true", help="also measure each N with persona stems")
    ap.add_argument("--messages", type=int, default=8, help="openings from mascot/data/fresh2 (first N by id)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    pack = load_pack("emotional-support")
    scenarios = sorted((s for s in load_scenarios(str(ROOT / "mascot/data/fresh2/test.csv"))), key=lambda s: s.id)
    messages = [s.turns[-1][1] for s in scenarios[: args.messages]]
    t = time.perf_counter()
    engine = Engine.load(EngineConfig(backend="llamacpp", checkpoints_dir=str(ROOT / "checkpoints")))
    load_s = time.perf_counter() - t
    warm_s = engine.warm_up(pack, "trained", replies="careful")
    rows = []
    for n in [int(x) for x in args.best_of.split(",")]:
        for stems in ([False, True] if args.stems else [False]):
            rows.append(run(engine, pack, n, messages, stems))
            print(json.dumps(rows[-1]), flush=True)
    from mascot.backends.llamacpp.calibrate import machine

    out = {"machine": machine(),
           "backend": engine.backend.info().model, "load_s": round(load_s, 1), "warm_up_s": round(warm_s, 1),
           "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
