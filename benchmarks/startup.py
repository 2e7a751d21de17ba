"""Start-up cost as a user meets it: the one-shot CLI answer and `app.py` to a served page.

- `cli`: wall time of `mascot chat --message ... --json` (a fresh process: imports, model load, adapters,
  the group's three replies), the median of `--rounds` runs, and the heavy libraries that process imported
  (torch, transformers, peft, trl, scipy, sklearn, sentence_transformers);
- `app`: wall time from starting `app.py` (warm-up on, as `make run`) until GET / answers 200, then the
  first three-speaker answer through the public `/chat` API.

Both run on a prepared venv (models converted, llama.cpp probe cached). `--repo DIR` measures another
checkout (e.g. a `git worktree` of an older commit) with the same venv; `--against DIR` measures a second one
in the same rounds, alternating with the first (on a shared machine whose speed drifts over minutes, separate
runs of two checkouts differ by more than the change between them).

    .venv/bin/python benchmarks/startup.py [--rounds 3] [--pause 20] [--fast] [--repo DIR] [--against DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = "Work has been really stressful lately and I can't switch off in the evenings."
HEAVY = ("torch", "transformers", "peft", "trl", "scipy", "sklearn", "sentence_transformers")
# runs the CLI in-process, then reports which heavy libraries it imported (on stderr, after the answer)
PROBE = """
import sys, runpy, time
import mascot.group.cli as cli
answer, spans = cli.run_message, []
def timed(*a, **k):  # the group is built: start-up ends and the answer begins
    spans.append(time.time())
    answer(*a, **k)
    spans.append(time.time())
cli.run_message = timed
sys.argv = ["mascot", "chat", "--message", {message!r}, "--json", *{extra!r}]
try:
    runpy.run_module("mascot", run_name="__main__")
except SystemExit:
    pass
print("HEAVY=" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
print("SPANS=" + ",".join(repr(t) for t in spans), file=sys.stderr)
"""


def env_for(repo: Path) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(repo)}
    env["MASCOT_DATA_DIR"] = env.get("MASCOT_DATA_DIR") or str(Path("/tmp") / "mascot-startup-data")
    return env


def cli_round(repo: Path, extra: tuple[str, ...] = ()) -> tuple[float, list[str], int, float]:
    """One one-shot CLI answer in a fresh process: (seconds, heavy libraries imported, turns answered, seconds of
    them spent answering once the group was built)."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PROBE.format(message=MESSAGE, heavy=HEAVY, extra=list(extra))],
                         cwd=repo, env=env_for(repo), capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"the CLI failed:\n{out.stderr[-2000:]}")
    lines = out.stderr.splitlines()
    heavy = next((ln[6:] for ln in lines if ln.startswith("HEAVY=")), "")
    spans = [float(x) for x in next((ln[6:] for ln in lines if ln.startswith("SPANS=")), "").split(",") if x]
    answering = spans[1] - spans[0] if len(spans) == 2 else float("nan")
    turns = sum(1 for ln in out.stdout.splitlines() if ln.startswith("{"))
    return took, [m for m in heavy.split(",") if m], turns, answering


def alternating(repos: list[Path], rounds: int) -> Iterator[Path]:
    """Each checkout once per round, the order reversed every other round."""
    for k in range(rounds):
        yield from (repos if k % 2 == 0 else repos[::-1])


def time_cli(repos: list[Path], rounds: int, pause: float = 0.0, extra: tuple[str, ...] = ()) -> list[dict]:
    """CLI figures per checkout; with several, each round runs all of them in turn, the order alternating, so a
    machine whose speed drifts over minutes (shared hosts do) weighs on every checkout alike. `answer_s` is the
    part spent answering once the group was built; the rest is start-up (imports, model load, adapters)."""
    times: dict[Path, list[float]] = {r: [] for r in repos}
    answers: dict[Path, list[float]] = {r: [] for r in repos}
    loads: dict[Path, list[float]] = {r: [] for r in repos}
    heavy: dict[Path, list[str]] = {}
    turns: dict[Path, int] = {}
    for repo in alternating(repos, rounds):
        time.sleep(pause)
        loads[repo].append(round(os.getloadavg()[0], 2))
        took, heavy[repo], turns[repo], answering = cli_round(repo, extra)
        times[repo].append(took)
        answers[repo].append(answering)
    return [{"median_s": round(statistics.median(times[r]), 2), "runs_s": [round(x, 2) for x in times[r]],
             "answer_median_s": round(statistics.median(answers[r]), 2),
             "start_up_median_s": round(statistics.median(t - a for t, a in zip(times[r], answers[r])), 2),
             "flags": list(extra), "load_avg_before_s": loads[r], "pause_s": pause, "turns": turns[r],
             "heavy_imports": heavy[r]} for r in repos]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_round(repo: Path) -> tuple[float, float]:
    """`app.py` started fresh: (seconds to a served page, seconds for the first /chat answer after it)."""
    port = free_port()
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=repo, env=env_for(repo),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"app.py exited with {proc.returncode} before serving")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
            if time.perf_counter() - t > 300:
                raise SystemExit("app.py did not serve within 300 s")
        served = time.perf_counter() - t
        from gradio_client import Client

        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        t2 = time.perf_counter()
        turns = client.predict(MESSAGE, [], "emotional-support", "trained", 3, 0, api_name="/chat")
        answered = time.perf_counter() - t2
        assert sum(1 for x in turns if x["speaker"] != "user") >= 1
        return served, answered
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # an open client connection can hold uvicorn's graceful shutdown
            proc.kill()
            proc.wait()


def time_app(repos: list[Path], rounds: int, pause: float = 0.0) -> list[dict]:
    """App figures per checkout, rounds alternating between checkouts as in `time_cli`."""
    served: dict[Path, list[float]] = {r: [] for r in repos}
    answered: dict[Path, list[float]] = {r: [] for r in repos}
    for repo in alternating(repos, rounds):
        time.sleep(pause)
        page, first = app_round(repo)
        served[repo].append(page)
        answered[repo].append(first)
    return [{"page_median_s": round(statistics.median(served[r]), 2), "page_runs_s": [round(x, 2) for x in served[r]],
             "first_answer_median_s": round(statistics.median(answered[r]), 2),
             "first_answer_runs_s": [round(x, 2) for x in answered[r]]} for r in repos]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    p.add_argument("--only", choices=("cli", "app"), default=None)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--fast", action="store_true", help="also time the CLI with --replies fast (no best-of-N draws)")
    p.add_argument("--pause", type=float, default=0.0, help="seconds of rest before each CLI round, so each start "
                   "meets a machine as idle as a user's (the back-to-back rounds raise the load average, and the "
                   "llama.cpp backend measures its threads only on a loaded machine)")
    p.add_argument("--against", type=Path, default=None, help="another checkout (e.g. a `git worktree` of the "
                   "previous commit) measured in the same rounds, alternating with --repo")
    args = p.parse_args()
    repos = [args.repo] + ([args.against] if args.against else [])

    def commit(repo: Path) -> str:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    from mascot.backends.llamacpp.calibrate import machine

    results = [{"repo": str(r), "commit": commit(r), **machine(), "message": MESSAGE} for r in repos]
    if args.only in (None, "cli"):
        variants: list[tuple[str, tuple[str, ...]]] = [("cli", ())] + ([("cli_fast", ("--replies", "fast"))] if args.fast else [])
        for key, extra in variants:
            for res, cli in zip(results, time_cli(repos, args.rounds, args.pause, extra)):
                res[key] = cli
                print(f"{res['commit']}: CLI one-shot three-speaker answer {' '.join(extra)}: {cli['median_s']} s "
                      f"(median of {args.rounds}; start-up {cli['start_up_median_s']} s, answer {cli['answer_median_s']} s); "
                      f"heavy imports: {', '.join(cli['heavy_imports']) or 'none'}", flush=True)
    if args.only in (None, "app"):
        for res, app in zip(results, time_app(repos, args.rounds, args.pause if args.against else 0.0)):
            res["app"] = app
            print(f"{res['commit']}: app.py to a served page: {app['page_median_s']} s; first /chat answer "
                  f"{app['first_answer_median_s']} s", flush=True)
    result = results[0]
    if args.against:
        result["against"] = results[1]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
