"""Train tab: launch a Stage-1 or Stage-2 run from a recipe, follow its progress.jsonl, browse finished runs.

UI wiring only; runs are jobs of the persistent job runner (`mascot.jobs`, shared with the Jobs tab: queued
behind other heavy jobs, cancelled as a process group, found again after a restart), and reading progress lives
in `mascot.train.launch`.
Rendered in the researcher app (app/admin.py, ADMIN_TABS) inside `with gr.Tab("Train"):` as
`render_admin_tab(settings)`. Output folders, recipe files and run cards must lie inside the checkpoints or
runs folder (`mascot.files.safe_paths`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr

from app.security import admin_files
from app.settings import Settings
from mascot.errors import MascotError
from mascot.files.safe_paths import resolve_inside
from mascot.group.engine import Engine
from mascot.jobs.runner import JobRunner
from mascot.jobs.store import Job
from mascot.train.launch import (
    PLOT_METRICS,
    STAGES,
    build_command,
    curve_images,
    finished_runs,
    get_stage,
    metric_points,
    output_for,
    progress_dir,
    read_progress,
    run_summary_rows,
    status_rows,
    tail,
)
from mascot.train.recipes import list_recipes
from mascot.train.stage1.config import STEPS

STATUS_HEADERS = ["step", "status", "done", "updated", "elapsed s", "message"]
RUN_HEADERS = ["run", "created", "recipe", "judge", "contexts", "pairs", "RM held-out acc.", "adapters", "minutes"]


def parse_overrides(text: str) -> dict[str, str]:
    """`field=value` per line (or comma-separated) -> overrides; blank lines and # comments ignored."""
    out: dict[str, str] = {}
    for part in (text or "").replace(",\n", "\n").splitlines():
        part = part.split("#", 1)[0].strip()
        if not part:
            continue
        if "=" not in part:
            raise MascotError(f"Override {part!r} must look like field=value (e.g. grpo.learning_rate=1e-4).")
        k, v = part.split("=", 1)
        out[k.strip().lstrip("-")] = v.strip()
    return out


def run_roots(settings: Settings) -> list[Path]:
    """The folders training output, followed logs and recipe files may be in."""
    return [Path(settings.checkpoints_dir), Path(settings.runs_dir)]


def check_recipe(recipe: str, settings: Settings, stage: str = "stage1") -> str:
    """A bundled recipe name, or a recipe file inside the checkpoints/runs folders (else refused)."""
    if recipe in get_stage(stage).list_recipes():
        return recipe
    return str(resolve_inside(recipe or "", run_roots(settings), what="recipe file"))


def confined_output(recipe: str, output: str | None, overrides: dict[str, str], settings: Settings,
                    stage: str = "stage1") -> Path:
    """Where a run with these settings writes, provided that is inside the checkpoints/runs folders.

    Checked on the final folder, so an override of `checkpoints_dir`, `output_dir` or `run` cannot
    lead elsewhere either; `..`, outside absolute paths and escaping symlinks are refused."""
    out = output_for(check_recipe(recipe, settings, stage), output or None,
                     {"checkpoints_dir": settings.checkpoints_dir, **overrides}, stage)
    return resolve_inside(out, run_roots(settings), what="output folder")


def jobs_runner(settings: Settings) -> JobRunner:
    """The app's shared job runner (its table in `settings.jobs_db_url`, job folders under `<runs>/jobs`)."""
    return JobRunner.shared(settings.jobs_db_url, Path(settings.runs_dir) / "jobs")


def training_job(runner: JobRunner) -> Job | None:
    """The newest training job (running, queued or ended)."""
    return next((j for j in runner.jobs(limit=50) if j.kind in STAGES), None)


def follow_dir(job: Job | None, recipe: str, output: str, settings: Settings, stage: str = "stage1") -> Path | None:
    """The folder with progress.jsonl to follow: the newest training job's, else the one the form points at (if
    allowed)."""
    if job is not None:
        return Path(job.progress_path).parent
    try:
        return progress_dir(confined_output(recipe, output, {}, settings, stage), stage)
    except MascotError:
        return None


def servable_copies(paths: list[str]) -> list[str]:
    """Copies of run files in the admin app's private folder: checkpoints and runs are blocked paths for
    every app (Gradio refuses to serve them), so charts are shown from copies only /admin serves."""
    if not paths:
        return []
    out = Path(tempfile.mkdtemp(dir=admin_files().exports, prefix="curves-"))
    return [str(shutil.copy2(p, out / Path(p).name)) for p in paths]


def metric_figure(points: list[dict[str, Any]], metric: str) -> Any:
    """One line per trainer step for `metric`, as a matplotlib figure (no pyplot state, safe across sessions).

    A `gr.LinePlot` fixes its colour scale to the series of its first value: lines of series that appear later
    (the next persona's trainer, another run) were drawn invisible, so the tab draws the figure itself."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    series: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        series.setdefault(p["series"], []).append((p["step"], p["value"]))
    for name, xy in series.items():
        xs, ys = zip(*sorted(xy))
        ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=name)
    ax.set_xlabel("trainer step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, f"no '{metric}' logged in this run yet", ha="center", va="center", transform=ax.transAxes)
    return fig


def live_line(engine: Engine | None) -> str:
    """Which run's adapters new chat conversations get."""
    if engine is None:
        return "The chat is not served by this process: nothing can be put live from here."
    live = engine.live.current
    return f"**Live in the chat:** {live.label}" + (f" · `{live.run_dir}`" if live.run_dir else "")


def put_live(engine: Engine | None, path: str | None, settings: Settings) -> str:
    """Put the picked finished run live in the chat (new conversations get it; conversations in progress keep
    theirs)."""
    if engine is None or not path:
        return "Pick a finished run first." if engine is not None else live_line(engine)
    try:
        folder = resolve_inside(path, run_roots(settings), what="run folder")
        live = engine.put_live(folder)
    except MascotError as exc:
        return f"❌ {exc}\n\n{live_line(engine)}"
    return f"Put live: new conversations get {live.label}.\n\n{live_line(engine)}"


def roll_back(engine: Engine | None) -> str:
    if engine is None:
        return live_line(engine)
    try:
        engine.roll_back()
    except MascotError as exc:
        return f"❌ {exc}\n\n{live_line(engine)}"
    return f"Rolled back.\n\n{live_line(engine)}"


def render_admin_tab(settings: Settings, engine: Engine | None = None) -> None:
    runner = jobs_runner(settings)
    recipes = list_recipes()

    gr.Markdown("### Training\nStage 1: judge → preference pairs → persona reward model → GRPO speakers. "
                "Stage 2: dialogue states → director GRPO on simulated conversations (speakers frozen).\n"
                "Runs `python -m mascot train stage1|stage2` as a job (see the Jobs tab): one heavy job at a time, "
                "the rest queue. Finished steps are skipped when a run is started again on the same output folder.")
    with gr.Row():
        stage = gr.Radio([(st.title, name) for name, st in STAGES.items()], value="stage1", label="Stage")
    with gr.Row():
        recipe = gr.Dropdown(recipes, value="tiny-cpu" if "tiny-cpu" in recipes else recipes[0], label="Recipe")
        max_steps = gr.Number(value=0, precision=0, label="Max steps per trainer (0 = the recipe's)", minimum=0)
        output = gr.Textbox(label="Output folder (empty = checkpoints/<run>)", placeholder="checkpoints/my-run")
    with gr.Row():
        only = gr.CheckboxGroup(list(STEPS), label="Steps to run (none ticked = all)")
        overrides = gr.Textbox(label="Overrides (field=value per line)", lines=2,
                               placeholder="max_contexts=12\ngrpo.learning_rate=1e-4")
    with gr.Row():
        start_btn = gr.Button("Start training", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    state_md = gr.Markdown("No run started from this app yet.")
    status = gr.Dataframe(headers=STATUS_HEADERS, value=[], label="Steps", interactive=False, wrap=True)
    metric = gr.Dropdown(list(PLOT_METRICS), value=PLOT_METRICS[0], label="Metric to plot (one line per trainer)")
    plot = gr.Plot(label="Metric per trainer step")
    plotted = gr.State(None)  # what the plot shows: (folder, metric, points, last value); redrawn on change
    log_box = gr.Textbox(label="Log (last lines)", lines=12, max_lines=12, autoscroll=True, interactive=False)
    timer = gr.Timer(2.0)

    with gr.Accordion("Finished runs", open=False):
        # the runs present when the page loads; Refresh picks up runs finished since
        runs_table = gr.Dataframe(headers=RUN_HEADERS, value=lambda: run_summary_rows(finished_runs(settings.checkpoints_dir)),
                                  interactive=False, wrap=True)
        with gr.Row():
            known = [c["path"] for c in finished_runs(settings.checkpoints_dir)]
            run_pick = gr.Dropdown(known, value=None, label="Run card", allow_custom_value=False)
            refresh_btn = gr.Button("Refresh")
        with gr.Row():
            live_btn = gr.Button("Put this run live in the chat", visible=engine is not None)
            back_btn = gr.Button("Roll back", visible=engine is not None)
        live_md = gr.Markdown(live_line(engine))
        card_md = gr.Markdown()
        curves_gallery = gr.Gallery(label="GRPO curves (run folder curves/*.png)", columns=1, height="auto")

    def pick_stage(name: str) -> tuple[Any, Any]:
        st = get_stage(name)
        names = st.list_recipes()
        return (gr.Dropdown(choices=names, value="tiny-cpu" if "tiny-cpu" in names else (names[0] if names else None)),
                gr.CheckboxGroup(choices=list(st.steps), value=[]))

    def start(stg: str, rec: str, steps: float | None, out: str, only_steps: list[str], ov_text: str) -> str:
        try:
            overrides = parse_overrides(ov_text)
            target = confined_output(rec, out, overrides, settings, stg)
            argv = build_command(check_recipe(rec, settings, stg), max_steps=int(steps) if steps else None,
                                 output=str(target) if out else None, only=list(only_steps or []) or None,
                                 overrides={"checkpoints_dir": settings.checkpoints_dir, **overrides}, stage=stg)
            job = runner.submit(stg, argv[argv.index("--recipe"):])
        except MascotError as exc:
            return f"❌ {exc}"
        return f"**{job.state.capitalize()}** `{job.command}`"

    def stop() -> str:
        job = training_job(runner)
        if job is None or not job.active:
            return "No run is in progress."
        return f"**{runner.cancel(job.id).state.capitalize()}.**"

    def refresh(stg: str, rec: str, out: str, key: str | None, shown: Any) -> tuple[Any, ...]:
        job = training_job(runner)
        folder = follow_dir(job, rec, out, settings, stg)
        events = read_progress(folder / "progress.jsonl") if folder else []
        key = key or PLOT_METRICS[0]
        pts = metric_points(events, (key,))
        now = (str(folder), key, len(pts), pts[-1]["value"] if pts else None)
        fig = gr.skip() if now == shown else metric_figure(pts, key)
        if job is not None:
            ended = f", ended {job.ended:%Y-%m-%d %H:%M}" if job.ended else ""
            head = f"**{job.state}** (started {job.created:%Y-%m-%d %H:%M}{ended}) · `{job.command}`"
            log_text = tail(job.log_path)
        else:
            head = f"Following `{folder}` (no run started from this app)." if folder else "Nothing to follow."
            log_text = tail(folder / "train.log") if folder else ""
            if folder and not log_text:
                log_text = "(no log here: this run was not started from the console; its steps are above)"
        return head, status_rows(events), fig, log_text, now

    def list_runs() -> tuple[Any, Any]:
        cards = finished_runs(settings.checkpoints_dir)
        names = [c["path"] for c in cards]
        return run_summary_rows(cards), gr.Dropdown(choices=names, value=names[0] if names else None)

    def show_card(path: str | None) -> tuple[str, list[str]]:
        if not path:
            return "", []
        try:
            folder = resolve_inside(path, run_roots(settings), what="run folder")
        except MascotError as exc:
            raise gr.Error(str(exc)) from exc
        readme = folder / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.exists() else f"`{path}` has no README.md."
        return text, servable_copies(curve_images(str(folder)))

    stage.change(pick_stage, stage, [recipe, only])
    start_btn.click(start, [stage, recipe, max_steps, output, only, overrides], state_md)
    stop_btn.click(stop, None, state_md)
    follow = ([stage, recipe, output, metric, plotted], [state_md, status, plot, log_box, plotted])
    timer.tick(refresh, *follow)
    metric.change(refresh, *follow)
    refresh_btn.click(list_runs, None, [runs_table, run_pick])
    run_pick.change(show_card, run_pick, [card_md, curves_gallery])
    live_btn.click(lambda path: put_live(engine, path, settings), run_pick, live_md)
    back_btn.click(lambda: roll_back(engine), None, live_md)
