"""Launching and following training runs from a UI (the admin tab) without importing gradio.

`TrainingJobs` starts `python -m mascot train stage1|stage2 ...` as a subprocess (one at a time, in its own
process group so Stop ends it and its children), logs its output to `train.log` beside the stage's
`progress.jsonl` (the run folder for Stage 1, `<run>/stage2/` for Stage 2), and reads that progress into
tables a UI can show.

    jobs = TrainingJobs(checkpoints_dir="checkpoints")
    job = jobs.start("tiny-cpu", max_steps=4, output="checkpoints/try1")
    rows = status_rows(read_progress(job.progress_path))
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
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
                "relevance/raw_mean", "consistency/raw_mean", "loss", "accuracy", "eval_accuracy", "completions/mean_length", "step_time")


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


@dataclass
class Job:
    """One launched run."""

    argv: list[str]
    output: Path
    process: subprocess.Popen
    started: float = field(default_factory=time.time)
    stopped_by_user: bool = False
    stage: str = "stage1"

    @property
    def progress_path(self) -> Path:
        return progress_dir(self.output, self.stage) / "progress.jsonl"

    @property
    def log_path(self) -> Path:
        return progress_dir(self.output, self.stage) / "train.log"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def state(self) -> str:
        if self.running:
            return "running"
        if self.stopped_by_user:
            return "stopped"
        return "finished" if self.returncode == 0 else f"failed (exit {self.returncode})"


class TrainingJobs:
    """At most one training subprocess at a time (training saturates the machine)."""

    def __init__(self, checkpoints_dir: str | Path = "checkpoints", cwd: str | Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.checkpoints_dir = Path(checkpoints_dir)
        self.cwd = Path(cwd) if cwd else Path.cwd()
        self.env = env
        self.job: Job | None = None
        self._lock = threading.Lock()

    def start(self, recipe: str, *, max_steps: int | None = None, output: str | None = None,
              only: list[str] | None = None, overrides: dict[str, Any] | None = None, stage: str = "stage1") -> Job:
        with self._lock:
            if self.job is not None and self.job.running:
                raise ConfigError(f"A training run is already in progress ({self.job.output}); stop it first.")
            ov = dict(overrides or {})
            ov.setdefault("checkpoints_dir", str(self.checkpoints_dir))
            argv = build_command(recipe, max_steps=max_steps, output=output, only=only, overrides=ov, stage=stage)
            out = output_for(recipe, output, ov, stage)
            if not out.is_absolute():
                out = self.cwd / out
            progress_dir(out, stage).mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.cwd), env.get("PYTHONPATH", "")) if p)
            log = (progress_dir(out, stage) / "train.log").open("ab")
            log.write(f"\n$ {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
            self.job = Job(argv, out, proc, stage=stage)
            return self.job

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the running job (SIGTERM to its process group, SIGKILL after `timeout`); False if none ran."""
        job = self.job
        if job is None or not job.running:
            return False
        job.stopped_by_user = True
        try:
            os.killpg(job.process.pid, signal.SIGTERM)  # the group we created: the run and its children only
        except ProcessLookupError:
            return True
        try:
            job.process.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(job.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            job.process.wait(5)
        return True


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
    """One row per step of its last invocation: [step, status, done/total, last update, elapsed s, message]."""
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
    for step, r in rows.items():
        frac = f"{r['done']}/{r['total']}" if r["done"] is not None and r["total"] else ("" if not r["done"] else str(r["done"]))
        when = time.strftime("%H:%M:%S", time.localtime(r["time"])) if r["time"] else ""
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


__all__ = ["PLOT_METRICS", "STAGES", "Job", "Stage", "TrainingJobs", "build_command", "finished_runs", "get_stage",
           "list_recipes", "metric_points", "output_for", "progress_dir", "read_progress", "run_summary_rows", "status_rows", "tail"]


def curve_images(run_dir: str | Path) -> list[str]:
    """The GRPO curve plots of a run (`<run>/curves/*.png`, one per adapter), sorted by name."""
    folder = Path(run_dir) / "curves"
    return [str(p) for p in sorted(folder.glob("*.png")) if not p.name.endswith(".tmp.png")] if folder.is_dir() else []
