"""`python -m mascot eval`: compare systems on scenarios with a judge, in the paper's table layout.

    python -m mascot eval --systems mascot,zero-shot,few-shot --scenarios bundled-test --judge offline --limit 12
"""

from __future__ import annotations

import argparse
import json

from mascot.evaluation.metrics import MAPPINGS
from mascot.evaluation.runner import EvalConfig, run_eval
from mascot.evaluation.systems import SYSTEMS
from mascot.judges import JUDGES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("what to evaluate")
    g.add_argument("--level", choices=("individual", "group"), default="individual",
                   help="individual: each persona's reply to an opening (this table); group: whole conversations with "
                        "the simulated user, MASCOT vs its ablations (see `eval --level group --help`)")
    g.add_argument("--systems", default="zero-shot,few-shot",
                   help=f"comma-separated systems: {', '.join(SYSTEMS)}; each may add +bestN (best of N draws by the "
                        "acceptability scorer) and +stems, e.g. mascot+best4+stems (default: %(default)s)")
    g.add_argument("--scenarios", default="bundled-test",
                   help="loader name (bundled-test, bundled:ed, esconv:PATH, qmsum:PATH, ...) or a dataset file/folder")
    g.add_argument("--pack", default="emotional-support", help="persona pack; only scenarios of its setting are used")
    g.add_argument("--limit", type=int, default=None, help="at most N scenarios per group (valence / OOD / domain)")
    g = parser.add_argument_group("judge")
    g.add_argument("--judge", default="offline", choices=sorted(JUDGES), help="judge (default: %(default)s)")
    g.add_argument("--judge-model", default=None, help="llm judge: model name (env MASCOT_JUDGE_MODEL)")
    g.add_argument("--judge-base-url", default=None, help="llm judge: OpenAI-compatible base URL (env MASCOT_JUDGE_BASE_URL)")
    g.add_argument("--judge-cache", default=None, help="llm judge: SQLite verdict cache path (env MASCOT_JUDGE_CACHE)")
    g.add_argument("--judge-workers", type=int, default=4, help="llm judge: concurrent requests (default: %(default)s)")
    g.add_argument("--scorer", default="shipped",
                   help="acceptability scorer for the Acceptable %% columns and +bestN systems: shipped, a folder "
                        "from `mascot accept train`, or none (default: %(default)s)")
    g = parser.add_argument_group("generation")
    g.add_argument("--backend", default="auto", help="generation backend: auto = llamacpp on CPU, transformers on GPU (default: %(default)s)")
    g.add_argument("--model", default="embedded", help="base model: embedded, a local folder or a cached hub name")
    g.add_argument("--dtype", default="auto")
    g.add_argument("--checkpoints-dir", default="checkpoints", help="where trained adapters live (default: %(default)s)")
    g.add_argument("--run", default=None, help="checkpoint run for mascot/sft adapters (default: tiny-cpu, else newest)")
    g.add_argument("--batch-size", type=int, default=16, help="scenarios generated together (default: %(default)s)")
    g.add_argument("--max-new-tokens", type=int, default=None, help="override the speakers' token budget")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--repeats", type=int, default=1,
                   help="rounds per scenario, with seeds --seed, --seed+1, ...; paired tests use each scenario's mean "
                        "(one 135M sample per scenario moved a baseline's Overall by 5 points between runs)")
    g.add_argument("--sc-samples", type=int, default=5, help="self-consistency: samples per persona turn")
    g.add_argument("--sc-select", default="majority", choices=["majority", "judge"],
                   help="self-consistency: keep the embedding medoid (majority) or the judge's favourite")
    g = parser.add_argument_group("output")
    g.add_argument("--mapping", default="linear", choices=MAPPINGS, help="1–5 -> 0–100: (s-1)/4*100 (linear) or s*20")
    g.add_argument("--output", default="runs/eval", help="output folder (default: %(default)s)")
    g.add_argument("--merge", default=None, metavar="DIR[,DIR...]",
                   help="generate nothing: combine earlier evaluations on the same scenarios (their results.json) "
                        "into --output, with paired tests between all their systems")
    g.add_argument("--no-progress", action="store_true", help="hide progress bars")


def main(args: argparse.Namespace) -> int:
    if args.merge:
        from mascot.evaluation.runner import merge_results

        merged = merge_results([d.strip() for d in args.merge.split(",") if d.strip()], args.output)
        print(open(merged["outputs"]["markdown"], encoding="utf-8").read())
        print("written:", json.dumps(merged["outputs"], indent=1))
        return 0
    judge_options = {}
    if args.judge == "llm":
        flags = {"model": args.judge_model, "base_url": args.judge_base_url, "cache_path": args.judge_cache,
                 "max_workers": args.judge_workers}
        judge_options = {k: v for k, v in {**args.settings.llm_judge_options(), **flags}.items() if v}
    cfg = EvalConfig(
        systems=[s.strip() for s in args.systems.split(",") if s.strip()], scenarios=args.scenarios, judge=args.judge,
        judge_options=judge_options, pack=args.pack, backend=args.backend, model=args.model, dtype=args.dtype,
        checkpoints_dir=args.checkpoints_dir, run=args.run, limit=args.limit, output=args.output,
        batch_size=args.batch_size, seed=args.seed, repeats=args.repeats, mapping=args.mapping, max_new_tokens=args.max_new_tokens,
        sc_samples=args.sc_samples, sc_select=args.sc_select, progress=not args.no_progress,
        scorer=None if args.scorer.lower() == "none" else args.scorer,
    )
    results = run_eval(cfg)
    print(open(results["outputs"]["markdown"], encoding="utf-8").read())
    print("written:", json.dumps(results["outputs"], indent=1))
    ran = [s for s in results["systems"].values() if s["status"] == "ok"]
    return 0 if ran else 1
