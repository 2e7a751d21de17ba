"""`python -m mascot jobs ...`: the console's job table from the command line.

    python -m mascot jobs submit eval -- --systems zero-shot,few-shot --limit 4   # queue (and start if free)
    python -m mascot jobs list                                                   # newest first, with states
    python -m mascot jobs show ID                                                # command, state, last log lines
    python -m mascot jobs cancel ID                                              # the whole process group
    python -m mascot jobs work                                                   # keep starting queued jobs
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mascot.jobs.kinds import KINDS
from mascot.jobs.runner import JobRunner
from mascot.train.launch import tail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs-dir", default=None, help="where each job's folder goes (default: <runs>/jobs)")
    parser.add_argument("--runs-dir", default="runs")
    sub = parser.add_subparsers(dest="jobs_command", required=True)
    p = sub.add_parser("submit", help="queue a job; it starts at once when no heavy job runs")
    p.add_argument("kind", choices=sorted(KINDS), help="what to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's own flags, after --")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends (keeps the queue moving)")
    sub.add_parser("list", help="jobs, newest first")
    p = sub.add_parser("show", help="one job: command, state and the last log lines")
    p.add_argument("id")
    p = sub.add_parser("cancel", help="cancel a queued job or end a running one")
    p.add_argument("id")
    p = sub.add_parser("work", help="start queued jobs as the machine frees up, until interrupted")
    p.add_argument("--every", type=float, default=2.0, help="seconds between checks")


def main(args: argparse.Namespace) -> int:
    runner = JobRunner(args.settings.jobs_db_url, args.jobs_dir or Path(args.runs_dir) / "jobs")
    if args.jobs_command == "submit":
        extra = list(args.args)
        while extra[:1] == ["--wait"]:  # REMAINDER also takes submit's own flag when it follows the kind
            args.wait, extra = True, extra[1:]
        extra = extra[1:] if extra[:1] == ["--"] else extra
        job = runner.submit(args.kind, extra)
        print(f"{job.id} {job.state}: {job.command}")
        if args.wait:
            while runner.get(job.id).active:
                time.sleep(1.0)
                runner.pump()
            job = runner.get(job.id)
            print(f"{job.id} {job.state}" + (f" (exit {job.returncode})" if job.returncode else ""))
            return 0 if job.state == "finished" else 1
        return 0
    if args.jobs_command == "list":
        runner.pump()
        for j in runner.jobs():
            print(f"{j.id}  {j.state:9}  {j.kind:11}  {j.created:%Y-%m-%d %H:%M}  {j.title}")
        return 0
    if args.jobs_command == "show":
        runner.pump()
        j = runner.get(args.id)
        print(json.dumps({**j.as_dict(), "command": j.command}, indent=1))
        print(tail(j.log_path, 20))
        return 0
    if args.jobs_command == "cancel":
        print(runner.cancel(args.id).state)
        return 0
    try:
        while True:
            runner.pump()
            time.sleep(args.every)
    except KeyboardInterrupt:
        return 0
