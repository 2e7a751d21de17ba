"""Summarise one Stage-1 run against the Stage-1 targets (docs/training.md): reward model, GRPO curve checks,
evaluation ablation.

Reads the run folder's `run_card.json` and `manifest.json` and one `python -m mascot eval` output folder per test set
(`results.json`, written with `--systems zero-shot,few-shot,sft,mascot`), and prints each target with its measured
figure and whether it is met; `--json` writes the same as a results file for `benchmarks/results/`.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/stage1_run_summary.py --run checkpoints/tiny-cpu \
        --eval bundled-test=runs/tiny-cpu/bundled-test --eval fresh=runs/tiny-cpu/fresh --json out.json

The targets: reward-model held-out pair accuracy >= 0.70 on >= 100 pairs; per persona the mean total
reward of the last 10 GRPO steps above the first 10, the final clipped ratio <= 0.2 and the format reward not
falling; on every set MASCOT above Zero-Shot and Few-Shot on Overall, Consistency above Zero-Shot, Relevance at
most 3 points below Zero-Shot, and GRPO adding Consistency over its SFT warm start (paired Wilcoxon over scenarios,
as `mascot eval` computes it); the recipe in under 60 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SYSTEMS = ("zero-shot", "few-shot", "sft", "mascot")
RELEVANCE_LIMIT = -3.0
RM_ACCURACY, RM_PAIRS, CLIPPED_MAX, MINUTES_MAX = 0.70, 100, 0.2, 60.0


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"{path} does not exist: pass a finished Stage-1 run folder and `mascot eval` output folders.")
    return json.loads(path.read_text(encoding="utf-8"))


def _paired(results: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """`a - b` per criterion from the eval's paired tests (stored under "a vs b" or "b vs a")."""
    paired = results.get("paired", {})
    if f"{a} vs {b}" in paired:
        return paired[f"{a} vs {b}"]
    if f"{b} vs {a}" in paired:
        flipped = {}
        for crit, t in paired[f"{b} vs {a}"].items():
            flipped[crit] = {**t, "mean_diff": None if t["mean_diff"] is None else -t["mean_diff"],
                             "mean_a": t.get("mean_b"), "mean_b": t.get("mean_a")}
        return flipped
    raise SystemExit(f"The eval results hold no paired test of {a} and {b}; evaluate with --systems {','.join(SYSTEMS)}.")


def rm_summary(card: dict[str, Any]) -> dict[str, Any]:
    rm = card["reward_model"]
    ev = rm.get("eval", {})
    by_source = {k: {"accuracy": v.get("accuracy"), "n": v.get("n")} for k, v in ev.get("by_source", {}).items()}
    acc, n = ev.get("accuracy", rm.get("eval_accuracy")), ev.get("n", rm.get("eval_pairs"))
    return {"kind": rm.get("kind"), "accuracy": acc, "n": n, "ci95": ev.get("ci95"), "before": rm.get("eval_accuracy_before"),
            "by_source": by_source, "met": acc is not None and n is not None and acc >= RM_ACCURACY and n >= RM_PAIRS}


def grpo_summary(card: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, g in card["grpo"].items():
        s = g.get("summary", {})

        def window(key: str, s: dict[str, Any] = s) -> dict[str, Any]:
            w = s.get(key) or {}
            return {k: w.get(k) for k in ("first", "last", "final")}

        checks = g.get("checks", {})
        out[name] = {"reward_weights": g.get("reward_weights"), "checks": checks,
                     "met": all(checks.get(k) for k in ("reward_rises", "clipped_ok", "format_not_falling")),
                     "reward": window("reward"), "format": window("rewards/format_reward/mean"),
                     "length": window("completions/mean_length"), "clipped": window("completions/clipped_ratio"),
                     "seconds_per_step": g.get("seconds_per_step"), "rollouts": g.get("rollouts")}
    return out


def _all(system: dict[str, Any]) -> dict[str, Any]:
    """A system's table over all scenario groups, by persona plus "Overall" (`mascot eval` writes table["all"])."""
    return system.get("table_all") or system["table"]["all"]


def eval_summary(results: dict[str, Any]) -> dict[str, Any]:
    systems = results["systems"]
    missing = [s for s in SYSTEMS if systems.get(s, {}).get("status") != "ok"]
    if missing:
        raise SystemExit(f"The eval results lack {', '.join(missing)}; evaluate with --systems {','.join(SYSTEMS)}.")
    table = {s: {c: round(_all(systems[s])["Overall"][c]["mean"], 2) for c in ("overall", "consistency", "relevance")}
             for s in SYSTEMS}
    per_persona = {s: {p: {c: round(v[c]["mean"], 2) for c in ("consistency", "relevance")}
                       for p, v in _all(systems[s]).items() if p != "Overall" and isinstance(v, dict) and "relevance" in v}
                   for s in SYSTEMS}
    ident = {s: round(systems[s]["identifiability"]["accuracy"], 3) for s in SYSTEMS if systems[s].get("identifiability")}
    vs = {b: {c: {"diff": t["mean_diff"], "p": t["p"]} for c, t in _paired(results, "mascot", b).items()}
          for b in ("zero-shot", "few-shot", "sft")}
    targets = {
        "overall_above_zero_shot": vs["zero-shot"]["overall"]["diff"] > 0,
        "overall_above_few_shot": vs["few-shot"]["overall"]["diff"] > 0,
        "consistency_above_zero_shot": vs["zero-shot"]["consistency"]["diff"] > 0,
        "relevance_within_3_of_zero_shot": vs["zero-shot"]["relevance"]["diff"] >= RELEVANCE_LIMIT,
        "grpo_adds_consistency_over_sft": vs["sft"]["consistency"]["diff"] > 0,
    }
    n = results.get("n_scenarios") or len(systems["mascot"].get("per_scenario", {}))
    return {"n_scenarios": n, "table": table, "per_persona": per_persona, "identifiability": ident, "mascot_vs": vs, "targets": targets,
            "met": all(targets.values())}


def summarise(run: Path, evals: dict[str, Path]) -> dict[str, Any]:
    card = _read(run / "run_card.json")
    manifest = _read(run / "manifest.json")
    step_seconds = {k: v.get("metrics", {}).get("seconds") for k, v in manifest.get("steps", {}).items()}
    seconds = card.get("seconds", {})
    total = seconds.get("total_all_steps")
    out: dict[str, Any] = {
        "run": str(run), "reward_model": rm_summary(card), "grpo": grpo_summary(card),
        "seconds": seconds, "step_seconds": step_seconds,
        "minutes_end_to_end": None if total is None else round(total / 60, 1),
        "eval": {name: eval_summary(_read(folder / "results.json")) for name, folder in evals.items()},
    }
    out["met"] = {
        "reward_model": out["reward_model"]["met"],
        "grpo_curve_checks": {k: v["met"] for k, v in out["grpo"].items()},
        "eval": {k: v["met"] for k, v in out["eval"].items()},
        "under_60_min": total is not None and total / 60 < MINUTES_MAX,
    }
    return out


def _fmt_p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.0e}" if p < 1e-3 else f"{p:.3f}")


def print_report(s: dict[str, Any]) -> None:
    rm = s["reward_model"]
    ci = rm["ci95"] or [None, None]
    print(f"Run {s['run']}: {s['minutes_end_to_end']} min, the sum of its steps' times (target < {MINUTES_MAX:.0f})")
    print(f"Reward model ({rm['kind']}): held-out accuracy {rm['accuracy']} {ci} on {rm['n']} pairs "
          f"(before training {rm['before']}); by source: "
          + ", ".join(f"{k} {v['accuracy']} on {v['n']}" for k, v in rm["by_source"].items())
          + f" -> {'met' if rm['met'] else 'MISSED'}")
    print("GRPO, first -> last 10 steps (final):")
    for name, g in s["grpo"].items():
        r, f, ln, c = g["reward"], g["format"], g["length"], g["clipped"]
        print(f"  {name:9s} reward {r['first']} -> {r['last']} | format {f['first']} -> {f['last']} | length "
              f"{ln['first']} -> {ln['last']} | clipped last 10 {c['last']} (final {c['final']}) | "
              f"{g['seconds_per_step']} s/step -> {'met' if g['met'] else 'MISSED ' + str(g['checks'])}")
    for name, e in s["eval"].items():
        t, v = e["table"], e["mascot_vs"]
        print(f"Eval {name} ({e['n_scenarios']} scenarios): Overall ZS {t['zero-shot']['overall']} / FS "
              f"{t['few-shot']['overall']} / SFT {t['sft']['overall']} / MASCOT {t['mascot']['overall']}")
        for b in ("zero-shot", "few-shot", "sft"):
            print(f"  MASCOT - {b:9s}: " + ", ".join(f"{c} {v[b][c]['diff']:+.2f} (p {_fmt_p(v[b][c]['p'])})"
                                                   for c in ("overall", "consistency", "relevance")))
        print("  identifiability: " + ", ".join(f"{k} {x}" for k, x in e["identifiability"].items()))
        print("  targets: " + ", ".join(f"{k} {'met' if ok else 'MISSED'}" for k, ok in e["targets"].items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="Stage-1 run folder (run_card.json, manifest.json)")
    p.add_argument("--eval", action="append", default=[], metavar="SET=FOLDER",
                   help="a `mascot eval` output folder, named by its test set (repeatable)")
    p.add_argument("--json", default=None, help="also write the summary as JSON here")
    args = p.parse_args(argv)
    evals = {}
    for item in args.eval:
        if "=" not in item:
            raise SystemExit(f"--eval {item!r}: write SET=FOLDER, e.g. fresh=runs/r25/fresh.")
        name, folder = item.split("=", 1)
        evals[name] = Path(folder)
    summary = summarise(Path(args.run), evals)
    print_report(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
