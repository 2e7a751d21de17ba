"""A small GRPO sweep over learning rate and KL beta for one persona, from a finished run's warm start.

Each point runs `python -m mascot train stage1 --only grpo:<persona>` in its own folder, starting GRPO
from the run's saved SFT adapter (`grpo_init_adapters: <run>/sft`), with the run's candidates and reward
model, for a few steps; the table compares the mean total reward of the first and last steps, the final
clipped ratio, the format reward and the KL.

    python benchmarks/grpo_sweep.py --run checkpoints/tiny-cpu --persona anchor --steps 10 \
        --lrs 1e-4,2e-4,5e-4 --betas 0,0.04 --parallel 2 --output runs/grpo-sweep
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path


def prepare(run: Path, folder: Path) -> None:
    """A sweep folder holding the run's data steps and reward model, marked done, so only GRPO runs."""
    (folder / "work").mkdir(parents=True, exist_ok=True)
    for name in ("candidates.jsonl", "judged.jsonl", "pairs.jsonl"):
        shutil.copy2(run / "work" / name, folder / "work" / name)
    if not (folder / "reward_model").exists():
        shutil.copytree(run / "reward_model", folder / "reward_model")
    manifest = json.loads((run / "manifest.json").read_text())
    keep = {k: v for k, v in manifest["steps"].items() if k in ("generate", "judge", "pairs", "reward_model")}
    (folder / "manifest.json").write_text(json.dumps({"steps": keep}, indent=2))


def summary(folder: Path, persona: str, window: int) -> dict:
    card = json.loads((folder / "manifest.json").read_text())["steps"].get(f"grpo:{persona}", {}).get("metrics", {})
    curve = card.get("curve", [])

    def mean(key: str, rows: list) -> float | None:
        vals = [r[key] for r in rows if key in r]
        return round(sum(vals) / len(vals), 4) if vals else None

    first, last = curve[:window], curve[-window:]
    return {"steps": len(curve), "reward_first": mean("reward", first), "reward_last": mean("reward", last),
            "format_first": mean("rewards/format_reward/mean", first), "format_last": mean("rewards/format_reward/mean", last),
            "clipped_last": curve[-1].get("completions/clipped_ratio") if curve else None,
            "kl_last": mean("kl", last), "seconds_per_step": card.get("seconds_per_step")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="checkpoints/tiny-cpu")
    ap.add_argument("--recipe", default="tiny-cpu")
    ap.add_argument("--persona", default="anchor")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lrs", default="1e-4,2e-4,5e-4")
    ap.add_argument("--betas", default="0,0.04")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--window", type=int, default=3, help="steps averaged at the start and the end")
    ap.add_argument("--output", default="runs/grpo-sweep")
    args = ap.parse_args()
    run, out = Path(args.run), Path(args.output)
    points = list(itertools.product(args.lrs.split(","), args.betas.split(",")))
    procs: list[tuple[tuple[str, str], Path, subprocess.Popen]] = []
    t0 = time.time()
    for lr, beta in points:
        folder = out / f"lr{lr}-beta{beta}"
        prepare(run, folder)
        argv = [sys.executable, "-m", "mascot", "train", "stage1", "--recipe", args.recipe, "--output", str(folder),
                "--only", f"grpo:{args.persona}", "--no-bars", "--sft_warm_start", "false", "--grpo_workers", "1",
                "--grpo_init_adapters", str(run / "sft"), "--grpo.max_steps", str(args.steps),
                "--grpo.learning_rate", lr, "--grpo.beta", beta]
        while sum(p.poll() is None for _, _, p in procs) >= args.parallel:
            time.sleep(5)
        log = (folder / "sweep.log").open("w")
        procs.append(((lr, beta), folder, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)))
    for _, _, p in procs:
        p.wait()
    rows = [{"lr": float(lr), "beta": float(beta), "exit": p.returncode, **summary(folder, args.persona, args.window)}
            for (lr, beta), folder, p in procs]
    (out / "sweep.json").write_text(json.dumps(rows, indent=2))
    print(f"GRPO sweep, persona {args.persona}, {args.steps} steps each, {time.time() - t0:.0f} s in all")
    print("| lr | beta | reward first -> last | format first -> last | final clipped | KL (last) | s/step |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['lr']:g} | {r['beta']:g} | {r['reward_first']} -> {r['reward_last']} | {r['format_first']} -> "
              f"{r['format_last']} | {r['clipped_last']} | {r['kl_last']} | {r['seconds_per_step']} |")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
