"""Training runs for a UI (the admin Train tab) without importing gradio: the command line of a stage, where
its `progress.jsonl` lives (the run folder for Stage 1, `<run>/stage2/` for Stage 2), and that progress read
into tables and curves. Runs are launched, queued and cancelled by the job runner (`mascot.jobs`).

    argv = build_command("tiny-cpu", max_steps=4, output="checkpoints/try1")
    rows = status_rows(read_progress(progress_dir("checkpoints/try1") / "progress.jsonl"))
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.train.progress import read_progress
from mascot.train.recipes import list_recipes, load_recipe
from mascot.train.runcard import read_run_card
from mascot.train.stage1.config import STEPS
from mascot.train.stage2.config import STAGE2_STEPS

# Metrics worth plotting per step, in display order (TRL / RewardTrainer log keys).
PLOT_METRICS = ("reward", "rewards/format_reward/mean", "persona_rm/raw_mean", "judge/raw_mean",
                "relevance/raw_mean", "consistency/raw_mean", "clip_ratio/region_mean", "loss", "accuracy",
                "eval_accuracy", "completions/mean_length", "step_time")


@dataclass(frozen=True)
class Stage:
    """What the launcher needs to know about one training stage."""

    name: str
    title: str
    steps: tuple[str, ...]
    subdir: str = ""  # where progress.jsonl and train.log live inside the run folder

    def list_recipes(self) -> list[str]:
        return list_recipes(self.name)

    def load(self, recipe: str, overrides: dict[str, Any]) -> Any:
        """The stage's config (with `.out`) for a recipe and overrides; raises ConfigError."""
        return load_recipe(recipe, overrides, stage=self.name)


STAGES: dict[str, Stage] = {
    "stage1": Stage("stage1", "Stage 1: persona alignment (judge, pairs, reward model, GRPO speakers)", STEPS),
    "stage2": Stage("stage2", "Stage 2: the director (states, GRPO on simulated conversations)", STAGE2_STEPS,
                    subdir="stage2"),
}


def get_stage(name: str) -> Stage:
    """The stage called `name`; raises ConfigError naming the valid stages."""
    if name not in STAGES:
        raise ConfigError(f"Unknown training stage {name!r}. Valid stages: {', '.join(STAGES)}.")
    return STAGES[name]


def build_command(recipe: str, *, max_steps: int | None = None, output: str | None = None, only: list[str] | None = None,
                  overrides: dict[str, Any] | None = None, python: str | None = None, stage: str = "stage1") -> list[str]:
    """The argv of one run of `stage`; validates the recipe and overrides first (raises ConfigError)."""
    st = get_stage(stage)
    ov = {k: str(v) for k, v in (overrides or {}).items() if v not in (None, "")}
    if max_steps:
        ov["max_steps"] = str(max_steps)
    if output:
        ov["output_dir"] = output
    st.load(recipe, ov)  # fail here, in the UI, rather than in the subprocess
    for s in only or []:
        if s not in st.steps and not (stage == "stage1" and s.startswith("grpo:")):
            raise ConfigError(f"Unknown {stage} step {s!r}. Valid steps: {', '.join(st.steps)}.")
    argv = [python or sys.executable, "-m", "mascot", "train", stage, "--recipe", recipe, "--no-bars"]
    if max_steps:
        argv += ["--max-steps", str(int(max_steps))]
    if output:
        argv += ["--output", str(output)]
    if only:
        argv += ["--only", ",".join(only)]
    for k, v in (overrides or {}).items():
        if v not in (None, ""):
            argv += [f"--{k}", str(v)]
    return argv


def output_for(recipe: str, output: str | None, overrides: dict[str, Any] | None = None, stage: str = "stage1") -> Path:
    """The run folder a run of `stage` with these settings writes to."""
    ov = {k: str(v) for k, v in (overrides or {}).items() if v not in (None, "")}
    if output:
        ov["output_dir"] = output
    return get_stage(stage).load(recipe, ov).out


def progress_dir(run_dir: str | Path, stage: str = "stage1") -> Path:
    """Where `stage` keeps progress.jsonl and train.log inside a run folder."""
    sub = get_stage(stage).subdir
    return Path(run_dir) / sub if sub else Path(run_dir)


# ------------------------------------------------------------------- reading progress
def invocations(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The events of each `python -m mascot train` invocation on one output folder, oldest first: a folder that
    was resumed or partly redone holds several (each opens with a `run` `started` event)."""
    runs: list[list[dict[str, Any]]] = []
    for e in events:
        if (e.get("step") == "run" and e.get("status") == "started") or not runs:
            runs.append([])
        runs[-1].append(e)
    return runs


def latest_events(events: list[dict[str, Any]], metrics_only: bool = False) -> list[dict[str, Any]]:
    """Each step's events from the last invocation that logged it (with `metrics_only`, the last one that logged
    its metrics: a step skipped as finished keeps the curve of the invocation that trained it). A step still
    'running' in an invocation that ended with the run 'done' is shown done (older runs did not log the end of
    the warm start)."""
    chosen: dict[str, list[dict[str, Any]]] = {}
    for run in invocations(events):
        finished = any(e.get("step") == "run" and e.get("status") == "done" for e in run)
        mine: dict[str, list[dict[str, Any]]] = {}
        for e in run:
            mine.setdefault(e.get("step", "?"), []).append(e)
        for step, rows in mine.items():
            if metrics_only and not any(r.get("status") == "metrics" for r in rows):
                continue
            if finished and rows[-1].get("status") == "metrics":
                rows = [*rows, {**rows[-1], "status": "done", "metrics": None, "message": ""}]
            chosen[step] = rows
    return [e for rows in chosen.values() for e in rows]


def status_rows(events: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per step of its last invocation, in the order the steps started: [step, status, done/total (or
    "all" for a finished step that logged no counts), last update with its date, elapsed s, message]."""
    rows: dict[str, dict[str, Any]] = {}
    for e in latest_events(events):
        step = e.get("step", "?")
        r = rows.setdefault(step, {"status": "", "done": None, "total": None, "start": e.get("time"), "time": None, "message": ""})
        if e.get("status") == "started":
            r["start"] = e.get("time")
        if r["status"] == "done" and e.get("status") == "skipped":  # another worker of the same run skipping it
            continue
        if e.get("status") != "metrics" or r["status"] in ("", "started", "progress"):
            r["status"] = {"metrics": "running", "progress": "running"}.get(e["status"], e["status"])
        r["time"] = e.get("time")
        if e.get("done") is not None:
            r["done"] = e["done"]
        if e.get("total") is not None:
            r["total"] = e["total"]
        if e.get("message"):
            r["message"] = e["message"]
    out = []
    for step, r in sorted(rows.items(), key=lambda kv: kv[1]["start"] or 0):
        frac = f"{r['done']}/{r['total']}" if r["done"] is not None and r["total"] else ("" if not r["done"] else str(r["done"]))
        if not frac and r["status"] in ("done", "skipped"):
            frac = "all"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["time"])) if r["time"] else ""
        elapsed = round(r["time"] - r["start"], 1) if r["time"] and r["start"] else None
        out.append([step, r["status"], frac, when, elapsed, r["message"][:200]])
    return out


def metric_points(events: list[dict[str, Any]], metrics: tuple[str, ...] = PLOT_METRICS) -> list[dict[str, Any]]:
    """Long-format points `{step, series, value}` for a line plot, from each trainer step's last invocation
    that trained it: series = "<trainer step name> <metric>" (just the trainer step name for one metric)."""
    pts = []
    for e in latest_events(events, metrics_only=True):
        if e.get("status") != "metrics" or not e.get("metrics"):
            continue
        for key in metrics:
            v = e["metrics"].get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                continue
            try:
                value = float(v)
            except ValueError:
                continue
            series = str(e.get("step")) if len(metrics) == 1 else f"{e.get('step')} {key}"
            pts.append({"step": e.get("done") or 0, "series": series, "value": value})
    return pts


def tail(path: str | Path, lines: int = 40, max_bytes: int = 64_000) -> str:
    """The last lines of a log file (progress-bar carriage returns folded)."""
    p = Path(path)
    if not p.exists():
        return ""
    with p.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        text = f.read().decode("utf-8", errors="replace")
    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines())
    return "\n".join(text.splitlines()[-lines:])


def finished_runs(checkpoints_dir: str | Path) -> list[dict[str, Any]]:
    """Runs with a run card, newest first: `{run, path, created, recipe, ...card}`."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        card = read_run_card(d) if d.is_dir() else None
        if card:
            out.append({**card, "path": str(d)})
    return sorted(out, key=lambda c: c.get("created", ""), reverse=True)


def run_summary_rows(cards: list[dict[str, Any]]) -> list[list[Any]]:
    """[run, created, recipe, judge, contexts, pairs, RM accuracy, adapters, minutes] per run card."""
    rows = []
    for c in cards:
        rm = c.get("reward_model") or {}
        acc = rm.get("eval_accuracy")
        rows.append([c.get("run"), c.get("created"), c.get("recipe"), c.get("judge"),
                     (c.get("data") or {}).get("contexts"), (c.get("pairs") or {}).get("pairs"),
                     None if acc is None else round(acc, 3), ", ".join(c.get("adapters") or {}),
                     round(((c.get("seconds") or {}).get("total_all_steps") or 0) / 60, 1) if c.get("seconds") else None])
    return rows


__all__ = ["PLOT_METRICS", "STAGES", "Stage", "build_command", "finished_runs", "get_stage",
           "list_recipes", "metric_points", "output_for", "progress_dir", "read_progress", "run_summary_rows", "status_rows", "tail"]


def curve_images(run_dir: str | Path) -> list[str]:
    """The GRPO curve plots of a run (`<run>/curves/*.png`, one per adapter), sorted by name."""
    folder = Path(run_dir) / "curves"
    return [str(p) for p in sorted(folder.glob("*.png")) if not p.name.endswith(".tmp.png")] if folder.is_dir() else []
