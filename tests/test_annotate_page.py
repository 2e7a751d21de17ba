"""Annotator page handlers (called directly) and the built page's config: blind, idempotent, resumable."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import pytest

from annotation.frames import load_judgments
from app.annotate_page import COMPONENT_NAMES, build_annotate_page, chat_messages, on_load, progress_html, start, vote
from app.annotate_text import BROWSER_ENTRY, BROWSER_JS, BROWSER_STORAGE, INVALID_STUDY_MESSAGE, PAGE_JS
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


def link(store, study="s1", **params):
    """The request of a page opened with the study's full link (its key included) plus `params`."""
    return request(study=study, key=store.link_key(study_id=study), **params)


def test_url_parameters_start_a_blind_task(store):
    out = on_load(store, C, link(store, annotator="P1"))
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
    out = on_load(store, C, request(STUDY_ID="s1", key=store.link_key(study_id="s1"), PROLIFIC_PID="5f0c"))
    assert out["state"]["annotator"] == "5f0c" and visible(out["task"])


def test_missing_parameters_show_the_login_form(store):
    out = on_load(store, C, request())
    assert visible(out["login"]) and not visible(out["task"])
    assert out["study_in"] == "" and "open the study link you were given" in out["status"]  # no study is listed
    out = on_load(store, C, link(store))  # the study's link without the annotator part: ask for the id
    assert visible(out["login"]) and out["study_in"] == "s1" and "Enter your annotator ID" in out["status"]
    assert out["state"]["link"] == store.link_key(study_id="s1")  # kept server-side for the form's Start
    bad = start(store, C, "nope", "P1")
    assert visible(bad["login"]) and "This study link is not valid" in bad["status"] and bad["study_in"] == ""


def test_vote_records_the_system_shown_and_moves_on(store):
    out = on_load(store, C, link(store, annotator="P1"))
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
    out = on_load(store, C, link(store, annotator="P1"))
    first = vote(store, C, "B", out["state"], NO_RATINGS, "")
    second = vote(store, C, "B", out["state"], NO_RATINGS, "")  # same (stale) session: a double click
    assert len(load_judgments(store, study_id="s1")) == 1
    assert second["state"]["token"] == first["state"]["token"], "the second click must not skip a task"
    assert "1 / 3" in second["progress"]


def test_reload_resumes_the_same_task(store):
    first = on_load(store, C, link(store, annotator="P1"))
    # A reload sends back the annotator key the browser keeps in localStorage.
    again = on_load(store, C, link(store, annotator="P1"), first["keys"])
    assert (again["chat_a"], again["chat_b"], again["state"]) == (
        first["chat_a"],
        first["chat_b"],
        first["state"],
    )


def test_finish_screen_with_completion_code(store):
    out = on_load(store, C, link(store, annotator="P1"))
    keys = out["keys"]
    for _ in range(3):
        out = vote(store, C, "tie", out["state"], NO_RATINGS, "")
    assert visible(out["finish"]) and not visible(out["task"])
    assert "DONE-77" in out["finish_md"] and "cc=DONE-77" in out["finish_md"] and "**3**" in out["finish_md"]
    assert out["state"]["token"] is None
    # Returning later shows the finish screen again rather than new work.
    assert visible(on_load(store, C, link(store, annotator="P1"), keys)["finish"])


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


# ----------------------------------------------------------------------------- identity, starvation, cosmetics
BROWSER = "b" * 20  # what BROWSER_JS sends: this browser's id from localStorage


def browser(name: str = BROWSER) -> dict:
    return {BROWSER_ENTRY: name}


def test_no_task_without_work_says_full_never_done(store, tmp_path):
    for n in range(2):  # k = 2 (the default): two annotators finish every item
        out = on_load(store, C, link(store, annotator=f"W{n}"), browser(f"w{n}" * 10))
        for _ in range(3):
            out = vote(store, C, "A", out["state"], NO_RATINGS, "")
    late = on_load(store, C, link(store, annotator="late"), browser())
    assert visible(late["finish"]) and "This study is full" in late["finish_md"]
    assert "you are done" not in late["finish_md"] and "DONE-77" not in late["finish_md"]
    seed_study(store, tmp_path, study_id="s2", n_items=1, annotators_per_item=1)
    on_load(store, C, link(store, "s2", annotator="holder"), browser("h" * 20))
    busy = on_load(store, C, link(store, "s2", annotator="other"), browser("o" * 20))
    assert "full for now" in busy["finish_md"] and "reload this page" in busy["finish_md"]
    store.set_open(study_id="s2", is_open=False)
    closed = on_load(store, C, link(store, "s2", annotator="other"), browser("o" * 20))
    assert "This study is closed" in closed["finish_md"]


def test_a_link_without_its_key_admits_no_new_id(store):
    out = on_load(store, C, request(study="s1", annotator="P1"), browser())
    assert visible(out["login"]) and INVALID_STUDY_MESSAGE in out["status"] and store.overview(study_id="s1").annotators == 0
    wrong = on_load(store, C, request(study="s1", key="guess", annotator="P1"), browser())
    assert INVALID_STUDY_MESSAGE in wrong["status"]


def test_a_first_load_that_never_arrived_resumes_on_reload(store):
    first = on_load(store, C, link(store, annotator="P1"), browser())
    # The browser never got the answer (timeout), so it stored no key; its browser id was stored before the request.
    again = on_load(store, C, link(store, annotator="P1"), browser())
    assert visible(again["task"]) and again["state"]["token"] == first["state"]["token"]
    typed = on_load(store, C, link(store, annotator=" Ｐ１ "), browser())  # the same id, typed in full width
    assert typed["state"]["token"] == first["state"]["token"]


def test_second_browser_gets_a_way_forward_and_continues_after_release(store):
    first = on_load(store, C, link(store, annotator="P1"), browser())
    vote(store, C, "A", first["state"], NO_RATINGS, "")
    phone = on_load(store, C, link(store, annotator="P1"), browser("p" * 20))
    assert visible(phone["login"]) and "ask the study owner to release your ID" in phone["status"]
    assert store.release_annotator(study_id="s1", annotator="p1")
    phone = on_load(store, C, link(store, annotator="P1"), browser("p" * 20))
    assert visible(phone["task"]) and "1 / 3" in phone["progress"]


def test_login_form_uses_the_link_key_of_its_own_study(store):
    page = on_load(store, C, link(store), browser())  # study and key from the link, no annotator yet
    out = start(store, C, "s1", "P9", browser(), browser=BROWSER, link=page["state"]["link"])
    assert visible(out["task"])
    out = start(store, C, "s1", "P10", browser(), browser=BROWSER, link="")
    assert INVALID_STUDY_MESSAGE in out["status"]


def test_progress_bar_is_empty_at_zero():
    assert 'style="width:0.0%"' in progress_html(0, 3) and "<b>0 / 3</b>" in progress_html(0, 3)
    assert 'style="width:50.0%"' in progress_html(2, 4) and 'style="width:0.0%"' in progress_html(0, 0)
    assert "<progress" not in progress_html(0, 3)  # a native bar at 0 draws a full grey track


def test_page_layout_has_no_stray_heading_or_clear_icon(store, tmp_path):
    page = build_annotate_page(Settings(data_dir=str(tmp_path)), store=store)
    config = page.get_config_file()
    comps = {c["id"]: c for c in config["components"]}
    chats = [c for c in comps.values() if c["type"] == "chatbot"]
    assert len(chats) == 2 and all("annot-chat" in c["props"]["elem_classes"] for c in chats)
    assert ".annot-chat .icon-button-wrapper{display:none!important}" in PAGE_JS
    assert not any(t[1] == "clear" for d in config["dependencies"] for t in d["targets"])
    heading = next(c for c in comps.values() if c["type"] == "markdown" and "Which response" in str(c["props"]["value"]))
    # The heading lives in the task column (the one with the vote buttons), so the finish screen does not show it.
    columns = [_subtree(config["layout"], c["id"]) for c in comps.values() if c["type"] == "column"]
    task = next(col for col in columns if _ids(col) & {c["id"] for c in chats})
    finish = next(col for col in columns if col is not task and not (_ids(col) & {heading["id"]}) and
                  any(comps[i]["type"] == "markdown" for i in _ids(col)) and len(_ids(col)) <= 2)
    assert heading["id"] in _ids(task) and heading["id"] not in _ids(finish)
    assert f'"{BROWSER_STORAGE}"' in BROWSER_JS and f'sent["{BROWSER_ENTRY}"]' in BROWSER_JS


def _ids(node: dict) -> set[int]:
    return {node["id"], *(i for child in node.get("children", []) for i in _ids(child))}


def _subtree(node: dict, target: int) -> dict | None:
    if node.get("id") == target:
        return node
    for child in node.get("children", []):
        found = _subtree(child, target)
        if found is not None:
            return found
    return None
