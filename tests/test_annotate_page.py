"""Annotator page handlers (called directly) and the built page's config: blind, idempotent, resumable."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import pytest

from annotation.frames import load_judgments
from app.annotate_page import COMPONENT_NAMES, build_annotate_page, chat_messages, on_load, start, vote
from app.settings import Settings
from tests.annotation_fixtures import make_store, seed_study

C = {name: name for name in COMPONENT_NAMES}
SYSTEM_WORDS = ("mascot", "few-shot", "cot")
NO_RATINGS = [None] * 6


def assert_blind(update: dict) -> None:
    blob = json.dumps(update, default=str).lower()
    for word in SYSTEM_WORDS:
        assert word not in blob, f"system name {word!r} reached the annotator page: {blob[:300]}"


def visible(update) -> bool:
    return update["visible"]


@pytest.fixture
def store(tmp_path):
    s = make_store(tmp_path)
    seed_study(s, tmp_path, n_items=3, completion_code="DONE-77", instructions="Pick the kinder reply.")
    return s


def request(**params):
    return SimpleNamespace(query_params=params)


def test_url_parameters_start_a_blind_task(store):
    out = on_load(store, C, request(study="s1", annotator="P1"))
    assert visible(out["task"]) and not visible(out["login"])
    assert (
        out["state"]["study"] == "s1"
        and out["state"]["annotator"] == "P1"
        and len(out["state"]["token"]) == 32
    )
    assert "0 / 3" in out["progress"] and out["instructions"] == "Pick the kinder reply."
    assert out["chat_a"][0] == {"role": "user", "content": "help " + out["chat_a"][0]["content"].split()[-1]}
    assert out["chat_a"][1]["content"].startswith(("**Listener:**", "**Assistant:**"))
    assert_blind(out)


def test_prolific_parameters_are_accepted(store):
    out = on_load(store, C, request(STUDY_ID="s1", PROLIFIC_PID="5f0c"))
    assert out["state"]["annotator"] == "5f0c" and visible(out["task"])


def test_missing_parameters_show_the_login_form(store):
    out = on_load(store, C, request())
    assert visible(out["login"]) and not visible(out["task"])
    assert out["study_in"]["choices"] == ["s1"] and "annotator ID" in out["status"]
    bad = start(store, C, "nope", "P1")
    assert visible(bad["login"]) and "This study link is not valid" in bad["status"] and bad["study_in"]["choices"] == []


def test_vote_records_the_system_shown_and_moves_on(store):
    out = on_load(store, C, request(study="s1", annotator="P1"))
    left_text = out["chat_a"][1]["content"]
    ratings = ["5", "2", None, None, "4", "4"]  # helpfulness A=5 B=2, safety A=4 B=4
    nxt = vote(store, C, "A", out["state"], ratings, "clear winner")
    assert "1 / 3" in nxt["progress"] and nxt["status"] == "✓ Saved." and nxt["comment"] == ""
    assert all(
        nxt[k] is None for k in COMPONENT_NAMES if k.endswith(("_a", "_b")) and k not in ("chat_a", "chat_b")
    )
    row = load_judgments(store, study_id="s1").iloc[0]
    expected = "MASCOT" if "side-a reply" in left_text else "Few-Shot CoT"
    assert row.winner == expected and row.left_system == expected and row.comment == "clear winner"
    side = "a" if expected == "MASCOT" else "b"
    other = "b" if side == "a" else "a"
    assert (row[f"helpfulness_{side}"], row[f"helpfulness_{other}"]) == (5, 2)
    assert_blind(nxt)


def test_double_click_records_once(store):
    out = on_load(store, C, request(study="s1", annotator="P1"))
    first = vote(store, C, "B", out["state"], NO_RATINGS, "")
    second = vote(store, C, "B", out["state"], NO_RATINGS, "")  # same (stale) session: a double click
    assert len(load_judgments(store, study_id="s1")) == 1
    assert second["state"]["token"] == first["state"]["token"], "the second click must not skip a task"
    assert "1 / 3" in second["progress"]


def test_reload_resumes_the_same_task(store):
    first = on_load(store, C, request(study="s1", annotator="P1"))
    # A reload sends back the annotator key the browser keeps in localStorage.
    again = on_load(store, C, request(study="s1", annotator="P1"), first["keys"])
    assert (again["chat_a"], again["chat_b"], again["state"]) == (
        first["chat_a"],
        first["chat_b"],
        first["state"],
    )


def test_finish_screen_with_completion_code(store):
    out = on_load(store, C, request(study="s1", annotator="P1"))
    keys = out["keys"]
    for _ in range(3):
        out = vote(store, C, "tie", out["state"], NO_RATINGS, "")
    assert visible(out["finish"]) and not visible(out["task"])
    assert "DONE-77" in out["finish_md"] and "cc=DONE-77" in out["finish_md"] and "**3**" in out["finish_md"]
    assert out["state"]["token"] is None
    # Returning later shows the finish screen again rather than new work.
    assert visible(on_load(store, C, request(study="s1", annotator="P1"), keys)["finish"])


def test_vote_without_session_asks_to_log_in(store):
    out = vote(store, C, "A", None, NO_RATINGS, "")
    assert visible(out["login"]) and "session ended" in out["status"]


def test_chat_messages_put_the_seeker_on_the_user_side():
    from annotation.schemas import Turn

    msgs = chat_messages((Turn("Seeker", "hi"), Turn("Empath", "hello"), Turn("", "plain")))
    assert msgs == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "**Empath:** hello"},
        {"role": "assistant", "content": "plain"},
    ]


def test_built_page_config_holds_no_system_names(store, tmp_path):
    page = build_annotate_page(Settings(data_dir=str(tmp_path)), store=store)
    assert isinstance(page, gr.Blocks)
    config = json.dumps(page.get_config_file(), default=str).lower()
    for word in SYSTEM_WORDS:
        assert word not in config
    assert "vote-a" in config and "response a" in config
    # Events are private: hidden from the API page and not callable by client libraries.
    assert {d["api_visibility"] for d in page.get_config_file()["dependencies"]} == {"private"}
