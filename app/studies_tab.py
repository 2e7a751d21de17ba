"""The researcher's Studies tab: list and create studies, import pairs/judgments, watch progress,
statistics with the Figure-7 chart, and downloads. Wiring only: logic is in `annotation/`.

Call `render_studies_tab(settings)` inside `with gr.Tab("Studies"):` of the researcher app (app/admin.py,
ADMIN_TABS, behind the /admin login). Imports take uploaded files only; exports go to the admin app's
private folder, which only /admin serves.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from annotation.exporting import export_judgments, export_preferences
from annotation.frames import load_judgments
from annotation.identity import study_link
from annotation.importing import import_judgments, import_pairs
from annotation.plots import save_preference_chart
from annotation.schemas import StudyConfig
from annotation.stats import study_stats
from annotation.store import StudyStore
from app.security import admin_files
from app.settings import Settings
from mascot.errors import MascotError
from mascot.files.safe_paths import is_inside

STUDY_COLUMNS = [
    "study",
    "name",
    "status",
    "k",
    "items",
    "complete",
    "judgments",
    "annotators",
    "live holds",
    "too fast",
    "attention failed",
    "leaky items",
]


def studies_table(store: StudyStore) -> pd.DataFrame:
    """One row per study with its monitoring counts."""
    rows = []
    for s in store.list_studies():
        o = store.overview(study_id=s.id)
        rows.append(
            [
                s.id,
                s.name,
                "open" if s.is_open else "closed",
                s.annotators_per_item,
                o.items,
                o.complete_items,
                o.judgments,
                o.annotators,
                o.live_holds,
                o.too_fast,
                o.attention_failed,
                o.leak_items,
            ]
        )
    return pd.DataFrame(rows, columns=STUDY_COLUMNS)


def annotator_link(store: StudyStore, study_id: str | None, settings: Settings) -> str:
    """Markdown with the URL to share with annotators (and its Prolific form); it carries the study's link key."""
    if not study_id:
        return "Select a study to see its annotator link."
    host = "YOUR-SERVER" if settings.host in ("0.0.0.0", "::", "") else settings.host  # bind-all: no real name
    base = f"http://{host}:{settings.port}/annotate/"
    key = store.link_key(study_id=study_id)
    return (
        f"**Annotator link:** `{study_link(base, study_id, key)}`\n\n"
        f"**Prolific:** `{study_link(base, study_id, key, '{{%PROLIFIC_PID%}}')}`\n\n"
        "Share the whole link: a new annotator ID is admitted only with its `key`. Without the `annotator` part, "
        "the page asks for the ID."
    )


def release_annotator(store: StudyStore, study_id: str | None, annotator: str | None) -> str:
    """Free an annotator id from the browser it is bound to (a participant who lost it, or changed device)."""
    if not study_id or not (annotator or "").strip():
        raise gr.Error("Select a study and type the annotator ID to release.")
    try:
        found = store.release_annotator(study_id=study_id, annotator=annotator or "")
    except MascotError as exc:
        raise _fail(exc) from exc
    if not found:
        raise gr.Error(f"Study {study_id!r} has no annotator {annotator.strip()!r}; check the ID (case does not matter).")
    return (f"Released `{annotator.strip()}` in `{study_id}`: the next browser that opens the study link under "
            "this ID takes it over and continues where it stopped.")


def _fail(exc: Exception) -> gr.Error:
    return gr.Error(str(exc))


def as_message(fn: Any, others: int) -> Any:
    """`fn` for an event whose first output is the message area: a refusal (gr.Error) becomes a line there and the
    other `others` outputs keep what they show, instead of every output turning into a red error frame."""
    def run(*args: Any) -> tuple[Any, ...]:
        try:
            return fn(*args)
        except gr.Error as exc:
            return (f"❌ {exc.message}", *[gr.skip()] * others) if others else f"❌ {exc.message}"

    return run


def create_study(
    store: StudyStore,
    study_id: str,
    name: str,
    instructions: str,
    k: float,
    attention_rate: float,
    min_seconds: float,
    hold_minutes: float,
    per_annotator: float | None,
    code: str,
) -> tuple[str, Any, Any]:
    """Create a study from the form; returns (message, studies table, study selector update)."""
    try:
        config = store.create_study(
            config=StudyConfig(
                id=(study_id or "").strip(),
                name=name.strip(),
                instructions=instructions.strip(),
                annotators_per_item=int(k),
                attention_rate=float(attention_rate),
                min_seconds=float(min_seconds),
                hold_minutes=float(hold_minutes),
                items_per_annotator=int(per_annotator) if per_annotator else None,
                completion_code=code.strip() or None,
            )
        )
    except MascotError as exc:
        raise _fail(exc) from exc
    ids = [s.id for s in store.list_studies()]
    return (
        f"Created study `{config.id}`. Now import its pairs.",
        studies_table(store),
        gr.update(choices=ids, value=config.id),
    )


def is_uploaded(path: str) -> bool:
    """True for a file Gradio received as an upload (its upload folder or the admin app's cache)."""
    roots = (gr.utils.get_upload_folder(), admin_files().cache)
    return Path(path).is_file() and any(is_inside(path, root) for root in roots)


def import_file(
    store: StudyStore, study_id: str | None, path: str | None, kind: str
) -> tuple[str, pd.DataFrame]:
    """Import an uploaded pairs JSONL (`kind="pairs"`) or judgments CSV (`kind="judgments"`)."""
    if not study_id or not path:
        raise gr.Error("Select a study and upload a file first.")
    if not is_uploaded(path):
        raise gr.Error("Imports take uploaded files only: use the upload box (server paths are refused).")
    try:
        fn = import_pairs if kind == "pairs" else import_judgments
        report = fn(store, study_id=study_id, path=path)
    except MascotError as exc:
        raise _fail(exc) from exc
    lines = [f"Imported **{report.added}** {kind} into `{study_id}` (systems: {', '.join(report.systems)})."]
    lines += [f"⚠️ {w}" for w in report.warnings]
    return "\n\n".join(lines), studies_table(store)


def set_open(store: StudyStore, study_id: str | None, is_open: bool) -> tuple[str, pd.DataFrame]:
    """Open or close the selected study for new annotators/items."""
    if not study_id:
        raise gr.Error("Select a study first.")
    store.set_open(study_id=study_id, is_open=is_open)
    return f"Study `{study_id}` is now {'open' if is_open else 'closed'}.", studies_table(store)


def compute_stats(
    store: StudyStore, study_id: str | None, exclude_fast: bool, min_accuracy: float | None, out_dir: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, str, pd.DataFrame, str]:
    """(comparisons, Bradley-Terry, ratings, agreement markdown, annotator quality, chart PNG path)."""
    if not study_id:
        raise gr.Error("Select a study first.")
    try:
        stats = study_stats(
            load_judgments(store, study_id=study_id, for_stats=True),
            exclude_fast=exclude_fast,
            min_attention_accuracy=min_accuracy or None,
        )
    except MascotError as exc:
        raise _fail(exc) from exc
    png = save_preference_chart(
        stats.comparisons,
        Path(out_dir) / f"{study_id}-preferences.png",
        title=f"Human preference ({study_id})",
    )
    a, pb = stats.agreement, stats.position_bias
    fmt = lambda v: "n/a" if v is None or v != v else f"{v:.3f}"  # noqa: E731  (None/NaN safe)
    notes = (
        f"**Agreement** over {a['items']} items with 2+ judgments: percent agreement {fmt(a['percent_agreement'])}, "
        f"Cohen's κ {fmt(a['cohen_kappa'])}, Krippendorff's α {fmt(a['krippendorff_alpha'])}.\n\n"
        f"**Position bias:** left response chosen in {fmt(pb['left_share'])} of {pb['n']} decisive votes "
        f"(sign test p = {fmt(pb['p_value'])}).\n\n**Excluded:** {json.dumps(stats.excluded)}"
    )
    bt = pd.DataFrame([r.__dict__ for r in stats.bradley_terry])
    ratings = pd.DataFrame([r.__dict__ for r in stats.ratings])
    return stats.table(), bt, ratings, notes, stats.quality, str(png)


def build_exports(store: StudyStore, study_id: str | None, out_dir: str) -> list[str]:
    """Write judgments CSV/JSONL, preference pairs, stats JSON and the chart; return their paths."""
    if not study_id:
        raise gr.Error("Select a study first.")
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in ("csv", "jsonl"):
        path = folder / f"{study_id}-judgments.{fmt}"
        with open(path, "w", encoding="utf-8", newline="") as fh:
            export_judgments(store, study_id=study_id, fmt=fmt, out=fh)
        paths.append(path)
    path = folder / f"{study_id}-preferences.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        export_preferences(store, study_id=study_id, out=fh)
    paths.append(path)
    stats = study_stats(load_judgments(store, study_id=study_id, for_stats=True))
    path = folder / f"{study_id}-stats.json"
    path.write_text(json.dumps(stats.to_dict(), indent=2), encoding="utf-8")
    paths += [path, save_preference_chart(stats.comparisons, folder / f"{study_id}-preferences.png")]
    return [str(p) for p in paths]


def render_studies_tab(settings: Settings, *, store: StudyStore | None = None) -> None:
    """Lay out the Studies tab in the current Blocks context (call inside `with gr.Tab("Studies"):`)."""
    store = store or StudyStore(settings.annotation_db_url)
    # Exports and charts go to the admin app's private folder, which the public apps never serve.
    out_dir = tempfile.mkdtemp(prefix="studies-", dir=admin_files().exports)
    ids = [s.id for s in store.list_studies()]
    with gr.Row():
        study = gr.Dropdown(ids, value=ids[0] if ids else None, label="Study", scale=3)
        refresh = gr.Button("Refresh", scale=1)
    table = gr.Dataframe(
        lambda: studies_table(store), label="Studies", interactive=False
    )  # fresh on each load
    link = gr.Markdown(annotator_link(store, ids[0] if ids else None, settings))
    message = gr.Markdown("")
    with gr.Row():
        open_btn, close_btn = gr.Button("Open study"), gr.Button("Close study")
    with gr.Accordion("Release an annotator ID", open=False):
        gr.Markdown("An ID works in the first browser that used it. If a participant lost that browser or changed "
                    "device, release the ID here; their next visit with the study link continues their work.")
        with gr.Row():
            release_id = gr.Textbox(label="Annotator ID to release", scale=3)
            release_btn = gr.Button("Release ID", scale=1)
    with gr.Accordion("Create a study", open=not ids):
        with gr.Row():
            new_id = gr.Textbox(label="Study id (appears in links)", placeholder="ed-human-1")
            new_name = gr.Textbox(label="Name (researchers only)")
        instructions = gr.Textbox(label="Instructions shown to annotators (never name the systems)", lines=2)
        with gr.Row():
            k = gr.Number(2, label="Annotators per item", precision=0, minimum=1)
            rate = gr.Number(0.0, label="Attention-check rate", minimum=0, maximum=0.9)
            min_s = gr.Number(0.0, label="Flag votes faster than (s)", minimum=0)
            hold = gr.Number(30.0, label="Hold minutes", minimum=1)
            per = gr.Number(0, label="Tasks per annotator (0 = no limit)", precision=0, minimum=0)
            code = gr.Textbox(label="Completion code (optional)")
        create_btn = gr.Button("Create study", variant="primary")
    with gr.Accordion("Import", open=False):
        with gr.Row():
            pairs_file = gr.File(label="Pairs (.jsonl)", file_types=[".jsonl"])
            judgments_file = gr.File(label="Judgments collected elsewhere (.csv)", file_types=[".csv"])
        with gr.Row():
            pairs_btn, judg_btn = gr.Button("Import pairs"), gr.Button("Import judgments")
    with gr.Accordion("Statistics", open=True):
        with gr.Row():
            exclude_fast = gr.Checkbox(label="Exclude too-fast votes")
            min_acc = gr.Number(
                None,
                label="Drop annotators below attention accuracy (0-1; 0 = keep all)",
                minimum=0,
                maximum=1,
            )
            stats_btn = gr.Button("Compute statistics", variant="primary")
        with gr.Column(visible=False) as results:  # shown once statistics exist (empty tables read "1 2 3")
            comp = gr.Dataframe(label="Pairwise preferences (two-sided sign test, ties excluded; Holm-adjusted)")
            chart = gr.Image(label="Preference chart (Figure 7 style)", type="filepath", interactive=False)
            notes = gr.Markdown("")
            with gr.Row():
                bt = gr.Dataframe(label="Bradley-Terry ratings (95% bootstrap CI)")
                ratings = gr.Dataframe(label="Ratings (Wilcoxon signed-rank)")
            quality = gr.Dataframe(label="Annotators")
    with gr.Accordion("Downloads", open=False):
        export_btn = gr.Button("Prepare downloads")
        files = gr.File(label="Exports", file_count="multiple", interactive=False)

    def refresh_all(current: str | None) -> tuple[Any, pd.DataFrame, str]:
        choices = [s.id for s in store.list_studies()]
        value = current if current in choices else (choices[0] if choices else None)
        return gr.update(choices=choices, value=value), studies_table(store), annotator_link(store, value, settings)

    def stats(s: str | None, f: bool, m: float | None) -> tuple[Any, ...]:
        return ("", *compute_stats(store, s, f, m, out_dir), gr.Column(visible=True))

    refresh.click(refresh_all, [study], [study, table, link])
    gr.Timer(5.0).tick(refresh_all, [study], [study, table, link])  # studies made elsewhere (CLI, other sessions)
    study.change(lambda s: annotator_link(store, s, settings), [study], [link])
    release_btn.click(as_message(lambda s, a: release_annotator(store, s, a), 0), [study, release_id], [message])
    create_btn.click(
        as_message(lambda *a: create_study(store, *a), 2),
        [new_id, new_name, instructions, k, rate, min_s, hold, per, code],
        [message, table, study],
    )
    pairs_btn.click(as_message(lambda s, p: import_file(store, s, p, "pairs"), 1), [study, pairs_file], [message, table])
    judg_btn.click(
        as_message(lambda s, p: import_file(store, s, p, "judgments"), 1), [study, judgments_file], [message, table]
    )
    open_btn.click(as_message(lambda s: set_open(store, s, True), 1), [study], [message, table])
    close_btn.click(as_message(lambda s: set_open(store, s, False), 1), [study], [message, table])
    stats_btn.click(as_message(stats, 7), [study, exclude_fast, min_acc],
                    [message, comp, bt, ratings, notes, quality, chart, results])
    export_btn.click(as_message(lambda s: ("", build_exports(store, s, out_dir)), 1), [study], [message, files])
