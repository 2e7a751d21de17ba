"""The job runner with short real jobs: launch, progress, queue, duplicates, cancel, recovery after a restart, and
the progress events every long command writes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from mascot.errors import ConfigError
from mascot.jobs.kinds import KINDS, get_kind
from mascot.jobs.runner import JobRunner
from mascot.jobs.store import Job

QUICK = ["--print-config"]  # a real stage-1 command that loads its recipe and exits without a model


def _runner(tmp_path: Path) -> JobRunner:
    return JobRunner(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path / "jobs")


def _wait(runner: JobRunner, job_id: str, states: tuple[str, ...] = ("finished", "failed", "cancelled"),
          timeout: float = 120) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runner.pump()
        job = runner.get(job_id)
        if job.state in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {runner.get(job_id).state}")


def test_a_job_runs_to_the_end_with_its_command_line_and_log(tmp_path):
    runner = _runner(tmp_path)
    job = runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])
    assert job.state == "running" and job.command.split()[1:5] == ["-m", "mascot", "train", "stage1"]
    done = _wait(runner, job.id)
    assert done.state == "finished" and done.returncode == 0 and done.ended >= done.started
    log = Path(done.log_path).read_text()
    assert log.startswith("$ ") and '"output_dir"' in log  # the command line, then its output
    assert json.loads((Path(done.folder) / "exit.json").read_text())["returncode"] == 0


def test_bad_arguments_are_refused_before_anything_is_stored(tmp_path):
    runner = _runner(tmp_path)
    with pytest.raises(ConfigError, match="--limt"):
        runner.submit("eval", ["--limt", "2"])
    with pytest.raises(ConfigError, match="invalid choice: 'foo'"):
        runner.submit("eval", ["--judge", "foo"])
    with pytest.raises(ConfigError, match=r"Unknown option '--lora-rr'. Did you mean --lora_r"):
        runner.submit("stage1", ["--lora-rr", "8"])
    with pytest.raises(ConfigError, match="grpo.beta.*expects float"):
        runner.submit("stage1", ["--grpo.beta", "x"])
    with pytest.raises(ConfigError, match="Valid job kind names: eval, group-eval"):
        runner.submit("evaluate", [])
    assert runner.jobs() == [] and not (tmp_path / "jobs").exists()


def test_one_heavy_job_at_a_time_the_rest_queue_and_the_same_command_is_refused(tmp_path):
    runner = _runner(tmp_path)
    slow = runner.submit("eval", ["--backend", "fake", "--limit", "50", "--output", str(tmp_path / "ev")])
    queued = runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])
    assert runner.get(slow.id).state == "running" and queued.state == "queued"
    with pytest.raises(ConfigError, match="already queued or running"):
        runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])
    assert [j.id for j in runner.jobs()] == [queued.id, slow.id]  # newest first
    cancelled = runner.cancel(slow.id, timeout=5)
    assert cancelled.state == "cancelled"
    with pytest.raises(ProcessLookupError):
        os.killpg(slow.pid, 0)  # the whole process group is gone
    assert _wait(runner, queued.id).state == "finished"  # the queue moved on
    with pytest.raises(ConfigError, match="already ended"):
        runner.cancel(slow.id)
    again = runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])  # an ended job frees its command
    assert _wait(runner, again.id).state == "finished"


def test_a_queued_job_can_be_cancelled_before_it_starts(tmp_path):
    runner = _runner(tmp_path)
    slow = runner.submit("eval", ["--backend", "fake", "--limit", "50", "--output", str(tmp_path / "ev")])
    waiting = runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])
    assert runner.cancel(waiting.id).state == "cancelled"
    runner.cancel(slow.id, timeout=5)
    assert runner.get(waiting.id).pid is None  # it never ran


def test_a_restarted_runner_finds_running_jobs_and_marks_dead_ones_failed_with_their_last_lines(tmp_path):
    first = _runner(tmp_path)
    job = first.submit("eval", ["--backend", "fake", "--limit", "50", "--output", str(tmp_path / "ev")])
    second = _runner(tmp_path)  # a new app process on the same store
    assert second.get(job.id).state == "running"
    os.killpg(job.pid, signal.SIGKILL)  # the job dies without an exit status (a crash, an OOM kill)
    first._children[job.id].wait(5)
    third = _runner(tmp_path)
    dead = third.get(job.id)
    assert dead.state == "failed" and dead.returncode is None
    assert "without an exit status" in dead.message and "$ " in dead.message  # the last log lines
    # a job another process started and that finished is read from its exit file
    quick = first.submit("stage1", QUICK + ["--output", str(tmp_path / "run")])
    deadline = time.monotonic() + 300  # a quick run, but it took over 60 s while CI's other tests held both cores
    while not (Path(quick.folder) / "exit.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    fresh = _runner(tmp_path)
    assert fresh.get(quick.id).state == "finished" and fresh.get(quick.id).returncode == 0


def test_a_job_that_fails_keeps_its_exit_status_and_last_lines(tmp_path):
    runner = _runner(tmp_path)
    job = runner.submit("eval", ["--backend", "fake", "--scenarios", str(tmp_path / "missing"), "--output",
                                 str(tmp_path / "ev")])
    done = _wait(runner, job.id)
    assert done.state == "failed" and done.returncode == 2 and "error:" in done.message


def test_an_unwritable_jobs_folder_is_refused_with_what_to_fix(tmp_path):
    (tmp_path / "jobs").write_text("a file where the folder should be")
    runner = JobRunner(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path / "jobs")
    with pytest.raises(ConfigError, match="Cannot create the job folder"):
        runner.submit("stage1", QUICK)
    assert runner.jobs() == []


def test_every_kind_builds_a_command_that_writes_progress(tmp_path):
    for name, kind in KINDS.items():
        built = kind.build([], tmp_path / name)
        assert built.argv[1:3] == ["-m", "mascot"] and built.progress_path.name == "progress.jsonl"
        if name not in ("stage1", "stage2"):
            assert built.argv[3:5] == ["--progress", str(tmp_path / name / "progress.jsonl")]
            assert built.result_path is not None and str(tmp_path / name) in str(built.result_path)
    assert get_kind("sweep").build([], tmp_path).argv[-4:-2] == ["--sweep", "big5"]


@pytest.mark.model  # the offline judge loads MiniLM
def test_long_commands_write_progress_events(tmp_path):
    from mascot.__main__ import main

    progress = tmp_path / "progress.jsonl"
    assert main(["--progress", str(progress), "eval", "--backend", "fake", "--limit", "1", "--systems", "zero-shot",
                 "--scorer", "none", "--judge", "offline", "--no-progress", "--output", str(tmp_path / "ev")]) == 0
    events = [json.loads(x) for x in progress.read_text().splitlines()]
    assert events[0]["step"] == "run" and events[0]["status"] == "started" and events[-1]["status"] == "done"
    steps = {(e["step"], e["status"]) for e in events}
    assert ("zero-shot: generating", "done") in steps and ("zero-shot: judging", "done") in steps
    assert any(e.get("total") == 1 and e.get("done") == 1 for e in events)
    assert main(["--progress", str(progress), "eval", "--scenarios", str(tmp_path / "none"), "--backend", "fake"]) == 2
    last = json.loads(progress.read_text().splitlines()[-1])
    assert last["status"] == "failed" and "exit 2" not in last["message"] and last["message"]


def test_a_finished_group_evaluation_becomes_a_blind_annotation_study(tmp_path):
    from annotation.store import StudyStore
    from app.jobs_tab import group_systems, study_from_job
    from app.settings import Settings

    settings = Settings(data_dir=str(tmp_path), runs_dir=str(tmp_path / "runs"))
    dialogue = {"situation": "lost my job", "turns": [{"speaker": "user", "text": "I lost my job."},
                                                      {"speaker": "Anchor", "text": "That sounds hard."}]}
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"scenarios": ["s1", "s2"], "systems": {
        name: {"mean": 60.0, "dialogues": [dialogue, dialogue]} for name in ("mascot", "round-robin")}}))
    job = Job(id="j1", kind="group-eval", title="", argv=[], folder=str(tmp_path), progress_path="",
              result_path=str(report), state="finished", heavy=True, pid=None, host="", returncode=0, message="",
              created=None, started=None, ended=None)
    assert group_systems(job) == ["mascot", "round-robin"]
    assert "2 pairs" in study_from_job(job, "mascot", "round-robin", "mvr-1", settings)
    store = StudyStore(settings.annotation_db_url)
    assert [s.id for s in store.list_studies()] == ["mvr-1"]
    with pytest.raises(ConfigError, match="name two different systems"):
        study_from_job(job, "mascot", "mascot", "mvr-2", settings)
    assert group_systems(Job(**{**job.__dict__, "state": "running"})) == []


def test_runs_started_from_the_command_line_are_listed_with_their_state(tmp_path):
    from mascot.jobs.runner import external_runs
    from mascot.train.progress import ProgressLog

    done = ProgressLog(tmp_path / "runs" / "eval-a" / "progress.jsonl")
    done.event("run", "started")
    done.event("zero-shot: judging", "done", 4, 4)
    done.event("run", "done")
    failed = ProgressLog(tmp_path / "runs" / "x" / "y" / "progress.jsonl")
    failed.event("run", "started")
    failed.event("run", "failed", message="No scenarios")
    live = ProgressLog(tmp_path / "checkpoints" / "r1" / "progress.jsonl")
    live.event("grpo:anchor", "progress", 3, 30)
    owned = ProgressLog(tmp_path / "runs" / "jobs" / "j1" / "progress.jsonl")
    owned.event("run", "started")
    rows = external_runs([tmp_path / "runs", tmp_path / "checkpoints"], {str(owned.path.resolve())})
    states = {Path(r["path"]).parent.name: r["state"] for r in rows}
    assert states == {"eval-a": "finished", "y": "failed", "r1": "running"}
    assert next(r for r in rows if r["state"] == "running")["done"] == 3


def test_reports_become_tables(tmp_path):
    from mascot.jobs.results import result_table

    csv = tmp_path / "results.csv"
    csv.write_text("system,group,persona,metric,mean,std,n\nzero-shot,positive,Anchor,emotion,7.5,0,1\n"
                   "zero-shot,negative,Anchor,emotion,8.5,0,1\nzero-shot,positive,Overall,emotion,6.0,0,1\n")
    table = result_table(csv)
    assert list(table.columns) == ["system", "metric", "Anchor", "Overall"] and table.loc[0, "Anchor"] == 8.0
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"profiles": {"big5-a": {"mascot": {"mean": 70.0}, "zero-shot": {"mean": 72.0}}}}))
    assert result_table(sweep).to_dict("records") == [{"profile": "big5-a", "mascot": 70.0, "zero-shot": 72.0}]
    group = tmp_path / "group.json"
    group.write_text(json.dumps({"systems": {"mascot": {"label": "MASCOT", "mean": 63.8, "dialogues": [{}]}}}))
    assert result_table(group).to_dict("records") == [{"system": "mascot", "mean": 63.8}]
    assert result_table(tmp_path / "missing.json").empty and result_table("").empty
    assert not result_table("mascot/data/safety/report.json").empty  # the shipped safety report
    from mascot.jobs.results import result_figure

    bars = result_figure(result_table(group)).axes[0]
    assert [t.get_text() for t in bars.get_yticklabels()] == ["mascot"] and bars.patches[0].get_width() == 63.8
    assert [t.get_text() for t in result_figure(result_table(sweep)).axes[0].get_yticklabels()] == ["mascot", "zero-shot"]
    assert result_figure(result_table("mascot/data/safety/report.json")) is None
    assert result_figure(result_table(tmp_path / "none.json")) is None


def test_two_researchers_pressing_launch_at_once_get_one_job(tmp_path):
    """Two app processes (two runners on one table) submit the same command at the same moment: one job."""
    import threading

    runners = [_runner(tmp_path), _runner(tmp_path)]
    barrier, outcomes = threading.Barrier(2), []

    def press(runner: JobRunner) -> None:
        barrier.wait()
        try:
            outcomes.append(runner.submit("stage1", QUICK + ["--output", str(tmp_path / "run")]).id)
        except ConfigError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=press, args=(r,)) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(runners[0].jobs()) == 1 and sum("already queued or running" in o for o in outcomes) == 1
    _wait(runners[0], runners[0].jobs()[0].id)


def test_a_job_running_on_another_host_is_left_to_that_host(tmp_path):
    """App replicas on several machines share the table: a job is judged alive or dead only where it runs."""
    from sqlalchemy.orm import Session

    from mascot.jobs.store import JobRow

    runner = _runner(tmp_path)
    with Session(runner.engine) as s, s.begin():
        s.add(JobRow(id="remote", kind="eval", title="", argv="[]", folder=str(tmp_path), progress_path="",
                     state="running", pid=2**22 + 17, host="another-host", active_key="k"))
    runner.pump()
    assert runner.get("remote").state == "running"
    assert runner.submit("stage1", QUICK + ["--output", str(tmp_path / "r")]).state == "queued"  # heavy job elsewhere


def test_a_database_url_that_cannot_be_used_is_refused_with_what_to_give():
    with pytest.raises(ConfigError, match="Cannot use the database URL 'nonsense://x'.*sqlite:///PATH"):
        JobRunner("nonsense://x", "/tmp/unused-jobs")
    with pytest.raises(ConfigError, match="Cannot open the job table at sqlite:////proc/nope/jobs.db"):
        JobRunner("sqlite:////proc/nope/jobs.db", "/tmp/unused-jobs")
