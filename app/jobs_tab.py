"""Jobs tab: launch any stage of the pipeline (training, evaluations, sweeps, the safety evaluation) as a job,
follow it live (progress, curves, log), cancel it, and read its results as a table.

UI wiring only; the runner, the kinds of job and the result tables live in `mascot.jobs`. Rendered in the
researcher app (app/admin.py, ADMIN_TABS) as `render_jobs_tab(settings)`. Files a job writes (reports, caches,
heatmaps) must lie inside the checkpoints or runs folder (`mascot.files.safe_paths`).
"""

from __future__ import annotations

import html
import json
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import gradio as gr

from app.admin_tab import check_recipe, jobs_runner, metric_figure, run_roots
from app.settings import Settings
from mascot.errors import ConfigError, MascotError
from mascot.files.safe_paths import resolve_inside
from mascot.jobs.kinds import KINDS, get_kind
from mascot.jobs.results import result_figure, result_table
from mascot.jobs.runner import external_runs
from mascot.jobs.store import Job, utcnow
from mascot.train.launch import PLOT_METRICS, metric_points, read_progress, tail

JOB_HEADERS = ["job", "kind", "state", "created (UTC)", "started", "ended", "minutes", "exit"]
EXTERNAL_HEADERS = ["progress file", "state", "updated", "step", "done"]
WRITE_FLAGS = ("--output", "--json", "--heatmap", "--cache", "--judge-cache")  # flags naming a file a job writes
EXAMPLES = {
    "stage1": "--recipe tiny-cpu --max-steps 2 --output runs/try-stage1",
    "stage2": "--recipe tiny-cpu --max-steps 2 --output runs/try-stage2",
    "eval": "--systems zero-shot,few-shot --limit 2",
    "group-eval": "--systems mascot,round-robin --limit 4",
    "sweep": "--sweep big5 --systems mascot,zero-shot --limit 2",
    "safety-eval": "",
}


def split_args(text: str) -> list[str]:
    """The arguments box as a command line would split it; a quote left open is refused."""
    try:
        return shlex.split(text or "")
    except ValueError as exc:
        raise ConfigError(f"Arguments: {exc} (close the quote).") from None


def confine_args(kind: str, args: list[str], settings: Settings) -> list[str]:
    """Refuse a job that would write outside the checkpoints/runs folders, or read a recipe file from elsewhere."""
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in (*WRITE_FLAGS, "--recipe") and not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        elif flag == "--export-pairs":
            value = args[i + 2] if not eq and i + 2 < len(args) else value
        elif flag not in WRITE_FLAGS:
            continue
        if flag == "--recipe" and kind in ("stage1", "stage2"):
            check_recipe(value, settings, kind)
        elif flag != "--recipe":
            resolve_inside(value, run_roots(settings), what=f"{flag} path")
    return args


def command_preview(kind: str, text: str, settings: Settings) -> str:
    """The command line a job of `kind` with these arguments would run, or why it would be refused."""
    try:
        args = confine_args(kind, split_args(text), settings)
        built = get_kind(kind).build(args, Path(settings.runs_dir) / "jobs" / "<new job>")
    except MascotError as exc:
        return f"❌ {exc}"
    return f"Command: `{shlex.join(built.argv[1:])}`"


def job_rows(jobs: list[Job]) -> list[list[Any]]:
    rows = []
    now = utcnow()
    for j in jobs:
        minutes = round(((j.ended or now) - j.started).total_seconds() / 60, 1) if j.started else None
        rows.append([j.id, j.kind, j.state, f"{j.created:%Y-%m-%d %H:%M:%S}",
                     f"{j.started:%H:%M:%S}" if j.started else "", f"{j.ended:%H:%M:%S}" if j.ended else "", minutes,
                     "" if j.returncode is None else j.returncode])
    return rows


def progress_html(events: list[dict[str, Any]], state: str) -> str:
    """A progress bar for the step the job is on, with its counts."""
    steps = [e for e in events if e.get("step") != "run" and e.get("total")]
    if not steps:
        return f"<p><b>{html.escape(state)}</b> · no progress reported yet</p>"
    e = steps[-1]
    done, total = e.get("done") or 0, e["total"]
    return (f"<p><b>{html.escape(state)}</b> · {html.escape(str(e['step']))}: {done}/{total}</p>"
            f"<progress value='{done}' max='{total}' style='width:100%'></progress>")


def group_systems(job: Job | None) -> list[str]:
    """The systems of a finished group evaluation's report (two or more can become an annotation study)."""
    if job is None or job.kind != "group-eval" or job.state != "finished" or not Path(job.result_path).is_file():
        return []
    return list(json.loads(Path(job.result_path).read_text(encoding="utf-8")).get("systems", {}))


def study_from_job(job: Job, a: str, b: str, study_id: str, settings: Settings) -> str:
    """A new blind A/B study of systems `a` and `b` from a finished group evaluation's dialogues."""
    from annotation.importing import import_pairs
    from annotation.schemas import StudyConfig
    from annotation.store import StudyStore
    from mascot.evaluation.group_report import export_pairs

    if not study_id.strip():
        raise ConfigError("Name the new study (its id appears in annotator links).")
    pairs = export_pairs(json.loads(Path(job.result_path).read_text(encoding="utf-8")), a, b)
    path = Path(job.folder) / f"pairs-{a}-vs-{b}.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in pairs), encoding="utf-8")
    store = StudyStore(settings.annotation_db_url)
    store.create_study(config=StudyConfig(id=study_id.strip(), name=f"{a} vs {b} (job {job.id})"))
    report = import_pairs(store, study_id=study_id.strip(), path=path)
    return (f"Study `{study_id.strip()}` created with {report.added} pairs ({a} vs {b}); share its link from the "
            "Studies tab.")


def render_jobs_tab(settings: Settings) -> None:
    runner = jobs_runner(settings)
    gr.Markdown("### Jobs\nEvery long command of the pipeline as a job: training stages, the individual and group "
                "evaluations, personality sweeps and the safety evaluation. One heavy job runs at a time and the rest "
                "queue; jobs survive a restart of the app, and Cancel ends a job's whole process group. The same "
                "table is open to the command line: `python -m mascot jobs list|submit|show|cancel`.")
    with gr.Row():
        kind = gr.Dropdown([(k.title, name) for name, k in KINDS.items()], value="eval", label="Job")
        args = gr.Textbox(label="Arguments (the command's own flags)", value=EXAMPLES["eval"], scale=2)
        launch = gr.Button("Launch", variant="primary")
    command_md = gr.Markdown(command_preview("eval", EXAMPLES["eval"], settings))
    message = gr.Markdown()
    table = gr.Dataframe(headers=JOB_HEADERS, value=[], label="Jobs (newest first)", interactive=False, wrap=True)
    with gr.Row():
        pick = gr.Dropdown([], label="Job to follow", allow_custom_value=False)
        cancel = gr.Button("Cancel job", variant="stop")
    head = gr.HTML()
    metric = gr.Dropdown(list(PLOT_METRICS), value=PLOT_METRICS[0], label="Training metric to plot", visible=False)
    plot = gr.Plot(label="Metric per trainer step", visible=False)
    log_box = gr.Textbox(label="Log (last lines)", lines=10, max_lines=10, autoscroll=True, interactive=False,
                         visible=False)
    result = gr.Dataframe(value=None, label="Results", interactive=False, wrap=True, visible=False)
    result_plot = gr.Plot(label="Headline score per system", visible=False)
    with gr.Accordion("Blind human study from this group evaluation", open=False, visible=False) as to_study:
        with gr.Row():
            sys_a = gr.Dropdown([], label="System A")
            sys_b = gr.Dropdown([], label="System B")
            study_id = gr.Textbox(label="New study id", placeholder="mascot-vs-round-robin-1")
            make_study = gr.Button("Create study")
    with gr.Accordion("Runs started from the command line", open=False):
        external = gr.Dataframe(headers=EXTERNAL_HEADERS, value=[], interactive=False, wrap=True)
    shown = gr.State(None)  # what the job details show (job, state, progress and log sizes, metric): redrawn on change
    timer = gr.Timer(2.0)

    def preview(k: str, text: str) -> str:
        return command_preview(k, text, settings)

    def pick_kind(k: str) -> tuple[Any, str]:
        return gr.Textbox(value=EXAMPLES.get(k, "")), preview(k, EXAMPLES.get(k, ""))

    def submit(k: str, text: str) -> tuple[str, Any, Any]:
        try:
            job = runner.submit(k, confine_args(k, split_args(text), settings))
        except MascotError as exc:
            return f"❌ {exc}", gr.skip(), gr.skip()
        rows, ids = refresh_table()
        return f"Job `{job.id}` launched ({job.state}).", rows, gr.Dropdown(choices=ids, value=job.id)

    def refresh_table() -> tuple[list[list[Any]], list[str]]:
        jobs = runner.jobs()  # the shared runner's thread keeps states and the queue moving
        return job_rows(jobs), [j.id for j in jobs]

    def signature(job_id: str | None, key: str | None) -> list[Any] | None:
        if not job_id:
            return None
        job = runner.get(job_id)
        sizes = [Path(p).stat().st_size if Path(p).is_file() else 0 for p in (job.progress_path, job.log_path)]
        return [job_id, job.state, key, *sizes]

    def show(job_id: str | None, key: str | None) -> tuple[Any, ...]:
        return (*follow(job_id, key), signature(job_id, key))

    def tick(current: str | None, key: str | None, drawn: list[Any] | None) -> tuple[Any, ...]:
        rows, ids = refresh_table()
        current = current if current in ids else (ids[0] if ids else None)
        roots = [settings.runs_dir, settings.checkpoints_dir]
        ext = [[r["path"], r["state"], f"{datetime.fromtimestamp(r['updated']):%Y-%m-%d %H:%M:%S}" if r["updated"] else "",
                r["step"], f"{r['done']}/{r['total']}" if r["total"] else (r["done"] or "")]
               for r in external_runs(roots, runner.known_progress())]
        table_update = gr.Dataframe(value=rows, label="Jobs (newest first)" if rows else "Jobs: none yet")
        now = signature(current, key)
        if now == drawn and now is not None:  # nothing new: no figure redrawn, no report read again
            return (table_update, gr.Dropdown(choices=ids, value=current), ext, *[gr.skip()] * len(details), drawn)
        # the study pickers keep the researcher's choice: they are filled when a job is picked, not on every tick
        return (table_update, gr.Dropdown(choices=ids, value=current), ext, *follow(current, key)[:-2], gr.skip(),
                gr.skip(), now)

    def follow(job_id: str | None, key: str | None) -> tuple[Any, ...]:
        if not job_id:
            return ("<p>No job yet: launch one above.</p>", gr.Dropdown(visible=False), gr.Plot(visible=False),
                    gr.Textbox(value="", visible=False),
                    gr.Dataframe(visible=False), gr.Plot(visible=False), gr.Accordion(visible=False), gr.skip(),
                    gr.skip())
        job = runner.get(job_id)
        events = read_progress(job.progress_path)
        training = job.kind in ("stage1", "stage2")
        top = progress_html(events, job.state) + f"<p><code>{html.escape(job.command)}</code></p>"
        if job.message and job.state != "finished":
            top += f"<pre>{html.escape(job.message[-2000:])}</pre>"
        fig = metric_figure(metric_points(events, (key or PLOT_METRICS[0],)), key or PLOT_METRICS[0]) if training else None
        table_value = result_table(job.result_path) if job.state == "finished" and job.result_path else None
        has_table = table_value is not None and not table_value.empty
        chart = result_figure(table_value) if has_table else None
        systems = group_systems(job)
        pick_a = gr.Dropdown(choices=systems, value=systems[0]) if len(systems) > 1 else gr.skip()
        pick_b = gr.Dropdown(choices=systems, value=systems[1]) if len(systems) > 1 else gr.skip()
        return (top, gr.Dropdown(visible=training), gr.Plot(value=fig, visible=training),
                gr.Textbox(value=tail(job.log_path, 30), visible=True),
                gr.Dataframe(value=table_value if has_table else None, visible=has_table),
                gr.Plot(value=chart, visible=chart is not None), gr.Accordion(visible=len(systems) > 1), pick_a, pick_b)

    def create(job_id: str | None, a: str | None, b: str | None, name: str) -> str:
        try:
            if not job_id or not a or not b:
                raise ConfigError("Pick a finished group evaluation and two of its systems.")
            return study_from_job(runner.get(job_id), a, b, name, settings)
        except MascotError as exc:
            return f"❌ {exc}"

    def do_cancel(job_id: str | None) -> str:
        if not job_id:
            return "Pick a job first."
        try:
            return f"Job `{job_id}` {runner.cancel(job_id).state}."
        except MascotError as exc:
            return f"❌ {exc}"

    details = [head, metric, plot, log_box, result, result_plot, to_study, sys_a, sys_b]
    kind.change(pick_kind, kind, [args, command_md])
    args.change(preview, [kind, args], command_md)
    launch.click(submit, [kind, args], [message, table, pick])
    cancel.click(do_cancel, pick, message)
    make_study.click(create, [pick, sys_a, sys_b, study_id], message)
    pick.change(show, [pick, metric], [*details, shown])
    metric.change(show, [pick, metric], [*details, shown])
    timer.tick(tick, [pick, metric, shown], [table, pick, external, *details, shown])
