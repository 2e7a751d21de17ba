"""The Train tab's wiring and the launcher's process handling (no training is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mascot.errors import ConfigError, MascotError
from mascot.train.launch import finished_runs, run_summary_rows, tail


def test_admin_tab_renders_and_parses_overrides(tmp_path: Path) -> None:
    import gradio as gr

    from app.admin_tab import parse_overrides, render_admin_tab
    from app.settings import Settings

    with gr.Blocks():
        with gr.Tab("Train"):
            render_admin_tab(Settings(checkpoints_dir=str(tmp_path), data_dir=str(tmp_path)))
    assert parse_overrides("max_contexts=12\n# a comment\ngrpo.learning_rate = 1e-4") == {
        "max_contexts": "12", "grpo.learning_rate": "1e-4"}
    with pytest.raises(MascotError, match="field=value"):
        parse_overrides("nonsense")


def test_metric_figure_draws_one_line_per_trainer_of_the_shipped_run() -> None:
    """The shipped run's reward curves: one line per persona's GRPO trainer, 30 steps each, every series drawn
    (a line plot with a colour scale fixed at its first value drew later series invisible)."""
    from app.admin_tab import metric_figure
    from mascot.train.launch import metric_points
    from mascot.train.progress import read_jsonl

    events = read_jsonl(Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-cpu" / "progress.jsonl")
    pts = metric_points(events, ("reward",))
    fig = metric_figure(pts, "reward")
    lines = fig.axes[0].get_lines()
    assert sorted(line.get_label() for line in lines) == ["grpo:anchor", "grpo:beacon", "grpo:catalyst"]
    assert all(len(line.get_xdata()) == 30 for line in lines)
    empty = metric_figure([], "loss")
    assert not empty.axes[0].get_lines() and "no 'loss'" in empty.axes[0].texts[0].get_text()


def test_a_training_run_is_a_job_of_the_shared_runner(tmp_path: Path) -> None:
    """The Train tab's runs are jobs of the shared runner: the form's recipe, steps and output become the
    command, the tab follows the newest training job, and a second start of the same run is refused."""
    from app.admin_tab import jobs_runner, training_job
    from app.settings import Settings
    from mascot.train.launch import build_command

    settings = Settings(checkpoints_dir=str(tmp_path / "ck"), data_dir=str(tmp_path), runs_dir=str(tmp_path / "runs"))
    runner = jobs_runner(settings)
    assert jobs_runner(settings) is runner and training_job(runner) is None
    argv = build_command("tiny-cpu", output=str(tmp_path / "ck" / "r"), overrides={"checkpoints_dir": str(tmp_path / "ck")})
    job = runner.submit("stage1", [*argv[argv.index("--recipe"):], "--print-config"])
    assert training_job(runner).id == job.id and "--output" in job.argv and job.argv.count("--no-bars") == 1
    with pytest.raises(ConfigError, match="already queued or running"):
        runner.submit("stage1", [*argv[argv.index("--recipe"):], "--print-config"])


def test_finished_runs_and_log_tail(tmp_path: Path) -> None:
    import json

    run = tmp_path / "r1"
    run.mkdir()
    (run / "run_card.json").write_text(json.dumps({
        "run": "r1", "created": "2026-01-01 00:00:00", "recipe": "tiny-cpu", "judge": "offline",
        "data": {"contexts": 24}, "pairs": {"pairs": 183}, "reward_model": {"eval_accuracy": 0.6},
        "adapters": {"Anchor": {}}, "seconds": {"total_all_steps": 120.0}}))
    rows = run_summary_rows(finished_runs(tmp_path))
    assert rows == [["r1", "2026-01-01 00:00:00", "tiny-cpu", "offline", 24, 183, 0.6, "Anchor", 2.0]]
    (run / "train.log").write_text("a\nprogress 10%\rprogress 50%\rprogress 100%\nlast line\n")
    assert tail(run / "train.log", 2) == "progress 100%\nlast line"


def test_curve_images_lists_a_runs_plots(tmp_path) -> None:
    from mascot.train.launch import curve_images

    assert curve_images(tmp_path) == []
    (tmp_path / "curves").mkdir()
    for name in ("beacon.png", "anchor.png", "anchor.tmp.png"):
        (tmp_path / "curves" / name).write_bytes(b"png")
    assert [p.rsplit("/", 1)[-1] for p in curve_images(tmp_path)] == ["anchor.png", "beacon.png"]


def test_launcher_knows_both_stages_and_where_each_logs(tmp_path: Path) -> None:
    from app.admin_tab import confined_output, follow_dir
    from app.settings import Settings
    from mascot.train.launch import build_command, get_stage, progress_dir

    argv = build_command("tiny-cpu", stage="stage2", max_steps=2, only=["grpo"])
    assert argv[3:6] == ["train", "stage2", "--recipe"] and argv[-2:] == ["--only", "grpo"]
    with pytest.raises(ConfigError, match="Valid steps: states, grpo"):
        build_command("tiny-cpu", stage="stage2", only=["reward_model"])
    with pytest.raises(ConfigError, match="Valid stages: stage1, stage2"):
        get_stage("stage3")
    assert progress_dir(tmp_path, "stage1") == tmp_path and progress_dir(tmp_path, "stage2") == tmp_path / "stage2"
    settings = Settings(checkpoints_dir=str(tmp_path), data_dir=str(tmp_path), runs_dir=str(tmp_path / "runs"))
    run = confined_output("tiny-cpu", "", {}, settings, "stage2")
    assert run == (tmp_path / "tiny-cpu").resolve()
    assert follow_dir(None, "tiny-cpu", "", settings, "stage2") == run / "stage2"
    with pytest.raises(MascotError, match="output folder"):
        confined_output("tiny-cpu", "/etc/evil", {}, settings, "stage2")


def test_put_live_and_roll_back_from_the_train_tab(tmp_path: Path) -> None:
    import shutil

    from app.admin_tab import live_line, put_live, roll_back
    from app.settings import Settings
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.personas import load_pack
    from tests.test_engine import _Adapters

    settings = Settings(checkpoints_dir=str(tmp_path / "ck"), data_dir=str(tmp_path), runs_dir=str(tmp_path / "runs"))
    engine = Engine(EngineConfig(backend="fake"), _Adapters(), run_dir=Path("checkpoints/tiny-cpu"))
    engine.attach_adapters(load_pack("emotional-support"))
    run = tmp_path / "ck" / "demos"
    shutil.copytree("checkpoints/tiny-cpu/speakers", run / "speakers")
    assert live_line(engine) == "**Live in the chat:** tiny-cpu (v0) · `checkpoints/tiny-cpu`"
    assert "new conversations get demos (v1)" in put_live(engine, str(run), settings)
    assert put_live(engine, "/etc", settings).startswith("❌ The run folder '/etc' is refused")
    assert engine.live.current.version == 1  # a refused run changed nothing
    assert "Rolled back" in roll_back(engine) and "tiny-cpu (v0)" in live_line(engine)
    assert "Nothing to roll back" in roll_back(engine)
    assert "not served by this process" in put_live(None, str(run), settings)
