"""Studies tab handlers (researcher side): create, import, monitor, stats with chart, downloads."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest

from app.settings import Settings
from app.studies_tab import (
    annotator_link,
    build_exports,
    compute_stats,
    create_study,
    import_file,
    release_annotator,
    render_studies_tab,
    set_open,
    studies_table,
)
from tests.annotation_fixtures import make_store, pair_line, write_jsonl


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path)


@pytest.fixture
def uploads(tmp_path, monkeypatch) -> Path:
    """Gradio's upload folder for this test: imports take files from there only."""
    folder = tmp_path / "uploads"
    folder.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def test_create_import_vote_and_analyse(store, tmp_path, uploads):
    msg, table, selector = create_study(store, "ed-1", "ED", "Be kind.", 1, 0.0, 0.0, 30, None, "")
    assert "Created study `ed-1`" in msg and list(table.study) == ["ed-1"] and selector["value"] == "ed-1"
    pairs = write_jsonl(uploads / "p.jsonl", [pair_line(f"i{n}") for n in range(8)])
    msg, table = import_file(store, "ed-1", str(pairs), "pairs")
    assert "Imported **8** pairs" in msg and table["items"].iloc[0] == 8
    judgments = uploads / "j.csv"
    judgments.write_text(
        "item_id,annotator,choice\n" + "".join(f"i{n},u1,MASCOT\n" for n in range(7)) + "i7,u1,tie\n"
    )
    msg, table = import_file(store, "ed-1", str(judgments), "judgments")
    assert "Imported **8** judgments" in msg and table.complete.iloc[0] == 8

    comp, bt, ratings, notes, quality, png = compute_stats(store, "ed-1", False, None, str(tmp_path / "out"))
    assert (comp.wins.iloc[0], comp.losses.iloc[0], comp.ties.iloc[0]) == (7, 0, 1)
    assert comp.stars.iloc[0] == "*"  # 7 of 7 decisive: p = 2 / 2**7 = 0.0156
    assert Path(png).read_bytes()[:4] == b"\x89PNG"
    assert list(bt.system) == ["MASCOT", "Few-Shot CoT"] and "Position bias" in notes
    assert quality.judgments.iloc[0] == 8

    files = build_exports(store, "ed-1", str(tmp_path / "out"))
    names = sorted(Path(f).name for f in files)
    assert names == [
        "ed-1-judgments.csv",
        "ed-1-judgments.jsonl",
        "ed-1-preferences.jsonl",
        "ed-1-preferences.png",
        "ed-1-stats.json",
    ]
    stats = json.loads(Path(next(f for f in files if f.endswith("stats.json"))).read_text())
    assert stats["comparisons"][0]["wins"] == 7


def test_errors_become_gradio_errors(store, tmp_path, uploads):
    with pytest.raises(gr.Error, match="Invalid study id"):
        create_study(store, "bad id", "", "", 2, 0, 0, 30, None, "")
    create_study(store, "s", "", "", 2, 0, 0, 30, None, "")
    outside = tmp_path / "server.jsonl"  # a server path, not an upload: refused before it is read
    write_jsonl(outside, [pair_line("x")])
    with pytest.raises(gr.Error, match="uploaded files only"):
        import_file(store, "s", str(outside), "pairs")
    bad = uploads / "bad.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(gr.Error, match="line 1"):
        import_file(store, "s", str(bad), "pairs")
    with pytest.raises(gr.Error, match="Select a study"):
        compute_stats(store, None, False, None, str(tmp_path))


def test_open_close_and_links(store):
    create_study(store, "s", "", "", 2, 0, 0, 30, None, "")
    msg, table = set_open(store, "s", False)
    assert "closed" in msg and table.status.iloc[0] == "closed"
    link = annotator_link(store, "s", Settings(host="example.org", port=7860, data_dir="/tmp"))
    key = store.link_key(study_id="s")
    assert f"http://example.org:7860/annotate/?study=s&key={key}&annotator=ANNOTATOR_ID" in link
    assert f"key={key}&annotator={{{{%PROLIFIC_PID%}}}}" in link
    assert studies_table(store).shape[0] == 1


def test_tab_renders_inside_a_blocks(store, tmp_path):
    with gr.Blocks() as demo:
        with gr.Tab("Studies"):
            render_studies_tab(Settings(data_dir=str(tmp_path)), store=store)
    labels = {b.label for b in demo.blocks.values() if getattr(b, "label", None)}
    assert {"Study", "Pairs (.jsonl)", "Exports"} <= labels


def test_release_button_frees_an_id_for_a_new_browser(store, tmp_path):
    from tests.annotation_fixtures import seed_study

    seed_study(store, tmp_path, study_id="s", n_items=2)
    key = store.link_key(study_id="s")
    first = store.next_task(study_id="s", annotator="P1", session_key="laptop", link_key=key)
    msg = release_annotator(store, "s", " ｐ１ ")  # another case and width: the same annotator
    assert "Released `ｐ１`" in msg and "continues where it stopped" in msg
    again = store.next_task(study_id="s", annotator="P1", session_key="phone", link_key=key)
    assert again.token == first.token
    with pytest.raises(gr.Error, match="has no annotator 'nobody'"):
        release_annotator(store, "s", "nobody")
    with pytest.raises(gr.Error, match="type the annotator ID"):
        release_annotator(store, "s", "  ")
    with pytest.raises(gr.Error, match="Invalid annotator id"):
        release_annotator(store, "s", "a\x00b")
