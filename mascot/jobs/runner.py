"""The job runner: launch, queue, follow, cancel and recover jobs, persisted in the job table.

Every job runs in its own process group through `python -m mascot.jobs.wrap`, which writes the command's exit
status to `<job folder>/exit.json` when it ends, so a runner that restarted (or another app process) still
learns how a job it did not start ended. One heavy job runs at a time; the others wait in the queue and the
next starts when `pump()` sees the machine free (the app's shared runner pumps every 2 s in a thread; the CLI
pumps on each command).

    runner = JobRunner("sqlite:///data/jobs.db", "runs/jobs")
    job = runner.submit("eval", ["--systems", "zero-shot", "--limit", "2"])
    runner.pump(); runner.get(job.id).state
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mascot.errors import ConfigError
from mascot.jobs.kinds import get_kind
from mascot.jobs.store import ACTIVE, Job, JobRow, make_engine, utcnow
from mascot.train.launch import tail

log = logging.getLogger(__name__)
LOG_LINES = 20  # log lines kept in a failed job's message


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child not yet reaped) has ended
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


class JobRunner:
    """Jobs in a SQLAlchemy database at `url`; each job's files under `jobs_dir/<id>/`; commands run in `cwd`."""

    _shared: dict[tuple[str, str], JobRunner] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, url: str, jobs_dir: str | Path, pump_every: float = 2.0) -> JobRunner:
        """One runner per (store, jobs folder) in this process, with a daemon thread that keeps its queue moving
        while no page is open."""
        key = (url, str(Path(jobs_dir).resolve()))
        with cls._shared_lock:
            if key not in cls._shared:
                runner = cls._shared[key] = cls(url, jobs_dir)
                threading.Thread(target=runner._pump_forever, args=(pump_every,), daemon=True,
                                 name="mascot-jobs").start()
            return cls._shared[key]

    def _pump_forever(self, every: float) -> None:
        while True:
            time.sleep(every)
            try:
                self.pump()
            except Exception:  # a database hiccup must not end the thread; the next tick retries
                log.warning("job queue check failed", exc_info=True)

    def __init__(self, url: str, jobs_dir: str | Path, cwd: str | Path | None = None, python: str = sys.executable,
                 env: dict[str, str] | None = None) -> None:
        self.engine = make_engine(url)
        self.jobs_dir = Path(jobs_dir).resolve()
        self.cwd = Path(cwd).resolve() if cwd else Path.cwd()
        self.python = python
        self.env = env or {}
        self._children: dict[str, subprocess.Popen] = {}
        self.refresh()  # jobs left running by a previous process: still running, or failed with their last lines

    # ------------------------------------------------------------------ launching
    def submit(self, kind: str, args: Sequence[str] = ()) -> Job:
        """Queue a job (checked first: a bad flag or recipe field raises ConfigError, nothing is stored) and
        start it if the machine is free. The same command queued or running already is refused."""
        k = get_kind(kind)
        job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        folder = self.jobs_dir / job_id
        built = k.build(list(args), folder, self.python)
        key = hashlib.sha256(json.dumps([kind, list(args)]).encode()).hexdigest()[:32]
        progress = built.progress_path if built.progress_path.is_absolute() else self.cwd / built.progress_path
        result = built.result_path
        if result is not None and not result.is_absolute():
            result = self.cwd / result
        try:
            folder.mkdir(parents=True, exist_ok=False)
            (folder / "log.txt").touch()
        except OSError as exc:
            raise ConfigError(f"Cannot create the job folder {folder}: {exc.strerror}. Check that {self.jobs_dir} "
                              "is writable and the disk has space.") from None
        row = JobRow(id=job_id, kind=kind, title=k.title, argv=json.dumps(built.argv), folder=str(folder),
                     progress_path=str(progress), result_path=str(result or ""), state="queued", active_key=key,
                     heavy=k.heavy)
        try:
            with Session(self.engine) as s, s.begin():
                s.add(row)
        except IntegrityError:
            folder.joinpath("log.txt").unlink(missing_ok=True)
            folder.rmdir()
            raise ConfigError("The same job is already queued or running: follow it, or cancel it first.") from None
        self.pump()
        return self.get(job_id)

    def pump(self) -> None:
        """Bring states up to date, then start the oldest queued job if no heavy job runs."""
        self.refresh()
        with Session(self.engine) as s, s.begin():
            if self.engine.dialect.name == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises this
                s.execute(text("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE"))
            running = s.scalars(select(JobRow).where(JobRow.state == "running", JobRow.heavy.is_(True))).first()
            nxt = s.scalars(select(JobRow).where(JobRow.state == "queued").order_by(JobRow.created, JobRow.id)).first()
            if nxt is None or (running is not None and nxt.heavy):
                return
            try:
                nxt.pid = self._spawn(nxt)
                nxt.state, nxt.started, nxt.host = "running", utcnow(), socket.gethostname()
            except OSError as exc:
                nxt.state, nxt.ended, nxt.active_key = "failed", utcnow(), None
                nxt.message = f"could not start: {exc}"

    def _spawn(self, row: JobRow) -> int:
        folder = Path(row.folder)
        argv = [self.python, "-m", "mascot.jobs.wrap", str(folder / "exit.json"), "--", *json.loads(row.argv)]
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        Path(row.progress_path).parent.mkdir(parents=True, exist_ok=True)
        with (folder / "log.txt").open("ab") as log:
            log.write(f"$ {Job.of(row).command}\n".encode())
            log.flush()
            proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._children[row.id] = proc
        return proc.pid

    # ------------------------------------------------------------------ following
    def refresh(self) -> None:
        """Running jobs whose process ended become finished or failed (from exit.json; without it, failed with
        the last log lines)."""
        with Session(self.engine) as s, s.begin():
            for row in s.scalars(select(JobRow).where(JobRow.state == "running")):
                if row.host and row.host != socket.gethostname():
                    continue  # a process of another machine (app replicas on several hosts): that host judges it
                child = self._children.get(row.id)
                if child is not None and child.poll() is None:
                    continue
                if child is None and _alive(row.pid):
                    continue
                self._children.pop(row.id, None)
                exit_file = Path(row.folder) / "exit.json"
                code = json.loads(exit_file.read_text()).get("returncode") if exit_file.exists() else None
                row.returncode, row.ended, row.active_key = code, utcnow(), None
                row.state = "finished" if code == 0 else "failed"
                if code != 0:
                    why = f"exit {code}" if code is not None else "the process died without an exit status"
                    row.message = why + "\n" + tail(Path(row.folder) / "log.txt", LOG_LINES)

    def cancel(self, job_id: str, timeout: float = 10.0) -> Job:
        """Cancel a queued job, or end a running one's whole process group (SIGTERM, then SIGKILL)."""
        with Session(self.engine) as s, s.begin():
            row = s.get(JobRow, job_id)
            if row is None:
                raise ConfigError(f"No job {job_id!r}.")
            if row.state not in ACTIVE:
                raise ConfigError(f"Job {job_id} has already ended ({row.state}).")
            pid, was_running = row.pid, row.state == "running"
            row.state, row.ended, row.active_key, row.message = "cancelled", utcnow(), None, "cancelled"
        if was_running and pid:
            _end_group(pid, timeout, self._children.pop(job_id, None))
        self.pump()
        return self.get(job_id)

    def known_progress(self) -> set[str]:
        """The progress files jobs of this table write."""
        with Session(self.engine) as s:
            return {str(Path(p).resolve()) for p in s.scalars(select(JobRow.progress_path))}

    def get(self, job_id: str) -> Job:
        with Session(self.engine) as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise ConfigError(f"No job {job_id!r}.")
            return Job.of(row)

    def jobs(self, limit: int = 100) -> list[Job]:
        """The newest jobs first."""
        with Session(self.engine) as s:
            rows = s.scalars(select(JobRow).order_by(JobRow.created.desc(), JobRow.id.desc()).limit(limit))
            return [Job.of(r) for r in rows]


def external_runs(roots: Sequence[str | Path], known: set[str], recent: float = 120.0) -> list[dict[str, object]]:
    """Runs started outside the console (`python -m mascot ... --progress`, `mascot train`) under `roots`: every
    `progress.jsonl` no job owns, newest first, with a state read from its events ('running' while it was written
    in the last `recent` seconds and has no end)."""
    from mascot.train.progress import read_progress

    out = []
    for root in roots:
        base = Path(root)
        found = [p for depth in ("*", "*/*", "*/*/*") for p in base.glob(f"{depth}/progress.jsonl")] if base.is_dir() else []
        for path in sorted(found):
            if str(path.resolve()) in known:
                continue
            events = read_progress(path)
            if not events:
                continue
            ends = [e for e in events if e.get("step") == "run" and e.get("status") in ("done", "failed")]
            last_start = max((i for i, e in enumerate(events) if e.get("step") == "run" and e.get("status") == "started"),
                             default=0)
            ended = [e for e in ends if events.index(e) >= last_start]
            if ended:
                state = "finished" if ended[-1]["status"] == "done" else "failed"
            else:
                state = "running" if time.time() - path.stat().st_mtime < recent else "stopped"
            step = next((e for e in reversed(events) if e.get("step") != "run"), events[-1])
            out.append({"path": str(path), "state": state, "started": events[0].get("time"),
                        "updated": events[-1].get("time"), "step": step.get("step"), "done": step.get("done"),
                        "total": step.get("total")})
    return sorted(out, key=lambda r: r["updated"] or 0, reverse=True)


def _end_group(pid: int, timeout: float, child: subprocess.Popen | None) -> None:
    """SIGTERM to the job's own process group (the wrapper, the command and its workers), SIGKILL after `timeout`."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap our own child so the group can empty
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if child is not None:
        child.wait(5)
