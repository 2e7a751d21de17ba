"""Who may hold work in a study: one identity per annotator id (NFKC, trimmed, case-insensitive), new ids only
through the study's full link, short holds for ids that never vote, release of an id bound to a lost browser,
and an honest answer ("full", never "done, 0") when no task is left."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import text

from annotation.assignment import NEWCOMER_HOLD_MINUTES
from annotation.cli import main
from annotation.db import make_engine, migrate
from annotation.errors import AnnotatorInUse, ImportValidationError, InvalidInput, LinkKeyInvalid, StudyClosed
from annotation.frames import load_judgments
from annotation.identity import annotator_key, clean_annotator, study_link
from annotation.importing import import_judgments
from annotation.reply_store import add_reply_label, import_reply_items, reply_label_rows
from annotation.schemas import Finished, Task
from annotation.store import StudyStore
from tests.annotation_fixtures import FakeClock, make_store, seed_study, write_jsonl

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    s = make_store(tmp_path, clock)
    seed_study(s, tmp_path, n_items=4, annotators_per_item=2, completion_code="CODE-1", hold_minutes=30)
    return s


def key(store: StudyStore, study: str = "s1") -> str:
    return store.link_key(study_id=study)


def finish(store: StudyStore, annotator: str, session_key: str, link: str) -> Finished:
    """Vote on every task the annotator is served; returns the finish result."""
    result = store.next_task(study_id="s1", annotator=annotator, session_key=session_key, link_key=link)
    while isinstance(result, Task):
        _, result = store.submit_and_next(token=result.token, choice="A")
    return result


# ----------------------------------------------------------------------------- normalisation
def test_ids_are_nfkc_trimmed_and_case_insensitive():
    assert clean_annotator("  ＡＬＩＣＥ\u3000") == "ALICE"  # full width and an ideographic space
    assert annotator_key("ALICE") == annotator_key("alice") == annotator_key(" ａｌｉｃｅ ") == "alice"
    assert annotator_key("Straße") == annotator_key("STRASSE")
    assert annotator_key("ﬁ") == "fi"  # a ligature is its letters
    for bad in ("", "   ", "a\u200bb", "x" * 201, None, 42):
        with pytest.raises(InvalidInput, match="Invalid annotator id"):
            annotator_key(bad)


def test_one_annotator_whatever_the_case_or_width(store):
    k = key(store)
    first = store.next_task(study_id="s1", annotator="ALICE", session_key="browser-1", link_key=k)
    again = store.next_task(study_id="s1", annotator=" ａｌｉｃｅ ", session_key="browser-1", link_key=k)
    assert isinstance(first, Task) and isinstance(again, Task) and again.token == first.token
    store.submit_and_next(token=first.token, choice="A")
    assert store.progress(study_id="s1", annotator="Alice").done == 1
    with store.engine.connect() as con:
        assert [tuple(r) for r in con.execute(text("SELECT external_id, match_key FROM annotators"))] == [("ALICE", "alice")]
    assert set(load_judgments(store, study_id="s1").annotator) == {"ALICE"}  # exported as first seen


def test_imports_and_the_cli_use_the_same_identity(store, tmp_path):
    done = store.next_task(study_id="s1", annotator="alice")
    store.submit(token=done.token, choice="A")
    item = load_judgments(store, study_id="s1").item_id.iloc[0]
    csv = tmp_path / "j.csv"
    csv.write_text(f"item_id,annotator,choice\n{item},ＡＬＩＣＥ,tie\n", encoding="utf-8")
    with pytest.raises(ImportValidationError, match="annotator 'ALICE' already judged item"):
        import_judgments(store, study_id="s1", path=csv)
    other = next(i for i in ("i0", "i1", "i2", "i3") if i != item)
    csv.write_text(f"item_id,annotator,choice\n{other},ＡＬＩＣＥ,tie\n", encoding="utf-8")
    assert import_judgments(store, study_id="s1", path=csv).added == 1
    assert store.progress(study_id="s1", annotator="alice").done == 2  # the imported vote is alice's
    store.next_task(study_id="s1", annotator="bob", session_key="b-1")
    out = io.StringIO()
    assert main(["--db", str(store.engine.url), "release-annotator", "ＢＯＢ", "--study", "s1"], out=out) == 0
    assert "Released" in out.getvalue()


def test_reply_labels_count_one_annotator_per_identity(store, tmp_path):
    from tests.test_annotation_replies import reply_item

    import_reply_items(store, "s1", write_jsonl(tmp_path / "items.jsonl", [reply_item("x0"), reply_item("x1")]))
    add_reply_label(store, study_id="s1", item_id="x0", annotator="Rater", acceptability="acceptable")
    with pytest.raises(InvalidInput, match="already labelled"):
        add_reply_label(store, study_id="s1", item_id="x0", annotator="ＲＡＴＥＲ", acceptability="borderline")
    add_reply_label(store, study_id="s1", item_id="x1", annotator="rater", acceptability="borderline")
    assert set(reply_label_rows(store, "s1").annotator) == {"Rater"}  # one annotator, first spelling


# ----------------------------------------------------------------------------- link key and browsers
def test_a_new_id_needs_the_study_link_key(store):
    for wrong in ("", "guess", key(store) + "x", key(store)[:-1]):
        with pytest.raises(LinkKeyInvalid):
            store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=wrong)
    assert store.overview(study_id="s1").annotators == 0  # a refused id leaves nothing behind
    assert isinstance(store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=key(store)), Task)
    # Resuming in the same browser needs no key; another browser is told to have the id released.
    assert isinstance(store.next_task(study_id="s1", annotator="p1", session_key="b", link_key=""), Task)
    with pytest.raises(AnnotatorInUse, match="ask the study owner to release your ID"):
        store.next_task(study_id="s1", annotator="P1", session_key="other", link_key=key(store))


def test_release_lets_a_new_browser_continue_the_held_task(store):
    k = key(store)
    first = store.next_task(study_id="s1", annotator="P1", session_key="laptop", link_key=k)
    with pytest.raises(AnnotatorInUse):
        store.next_task(study_id="s1", annotator="P1", session_key="phone", link_key=k)
    assert store.release_annotator(study_id="s1", annotator="p1") is True
    assert store.release_annotator(study_id="s1", annotator="nobody") is False
    with pytest.raises(LinkKeyInvalid):  # a released id is bound again only through the full link
        store.next_task(study_id="s1", annotator="P1", session_key="thief", link_key="")
    resumed = store.next_task(study_id="s1", annotator="P1", session_key="phone", link_key=k)
    assert isinstance(resumed, Task) and resumed.token == first.token  # same held task, same sides
    with pytest.raises(AnnotatorInUse):  # now the laptop is the other browser
        store.next_task(study_id="s1", annotator="P1", session_key="laptop", link_key=k)
    assert finish(store, "P1", "phone", k).progress.done == 4


def test_links_carry_the_study_key():
    assert study_link("http://h:1/annotate/", "s1", "K-y_9") == "http://h:1/annotate/?study=s1&key=K-y_9&annotator=ANNOTATOR_ID"
    assert study_link("b/", "s1", "k", "{{%PROLIFIC_PID%}}").endswith("&annotator={{%PROLIFIC_PID%}}")


# ----------------------------------------------------------------------------- starvation
def test_ids_opened_by_a_script_cannot_starve_the_study(store, clock):
    k = key(store)
    # An outsider without the link key: 100 new ids, none of which gets a hold.
    for n in range(100):
        with pytest.raises(LinkKeyInvalid):
            store.next_task(study_id="s1", annotator=f"bot{n}", session_key=f"bot{n}", link_key="")
    assert store.overview(study_id="s1").live_holds == 0
    done = finish(store, "real-1", "real-browser-1", k)
    assert done.progress.done == 4 and done.completion_code == "CODE-1" and done.reason == "done"

    # Someone with the link opens 100 ids and never votes: 4 items x k=2 leaves 4 slots, which they hold...
    for n in range(100):
        store.next_task(study_id="s1", annotator=f"insider{n}", session_key=f"i{n}", link_key=k)
    assert store.overview(study_id="s1").live_holds == 4
    waiting = store.next_task(study_id="s1", annotator="real-2", session_key="real-browser-2", link_key=k)
    assert isinstance(waiting, Finished) and waiting.reason == "busy" and waiting.completion_code is None
    # ...for NEWCOMER_HOLD_MINUTES only (not the study's 30): then the real participant finishes the study.
    clock.advance(minutes=NEWCOMER_HOLD_MINUTES + 0.5)
    done = finish(store, "real-2", "real-browser-2", k)
    assert done.progress.done == 4 and done.completion_code == "CODE-1"
    assert store.overview(study_id="s1").complete_items == 4
    late = store.next_task(study_id="s1", annotator="real-3", session_key="real-browser-3", link_key=k)
    assert isinstance(late, Finished) and late.reason == "full" and late.progress.done == 0


def test_holds_are_short_until_the_first_vote(store, clock):
    k = key(store)
    task = store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=k)
    clock.advance(minutes=NEWCOMER_HOLD_MINUTES - 1)
    assert store.overview(study_id="s1").live_holds == 1
    clock.advance(minutes=2)
    assert store.overview(study_id="s1").live_holds == 0  # lapsed: the slot is free for others
    _, nxt = store.submit_and_next(token=task.token, choice="B")  # the slot was still free: the vote counts
    assert len(load_judgments(store, study_id="s1")) == 1
    clock.advance(minutes=29)  # a participant who has voted holds for the study's hold_minutes
    assert store.overview(study_id="s1").live_holds == 1 and isinstance(nxt, Task)


def test_a_closed_study_says_so(store):
    k = key(store)
    store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=k)
    store.set_open(study_id="s1", is_open=False)
    with pytest.raises(StudyClosed, match="closed"):
        store.next_task(study_id="s1", annotator="P2", session_key="c", link_key=k)
    result = store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=k)
    assert isinstance(result, Task)  # a held task can still be answered
    _, after = store.submit_and_next(token=result.token, choice="tie")
    assert isinstance(after, Finished) and after.reason == "done" and after.completion_code == "CODE-1"


# ----------------------------------------------------------------------------- migration
def test_upgrade_gives_link_keys_and_folds_existing_ids(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    migrate(engine, "0004")
    with engine.begin() as conn:
        for study in ("a", "b"):
            conn.execute(text(
                "INSERT INTO studies (id, name, instructions, annotators_per_item, attention_rate, min_seconds, "
                f"hold_minutes, order_secret, is_open, created_at) VALUES ('{study}', '{study}', '', 2, 0, 0, 30, "
                "'k', 1, '2025-01-01')"))
        conn.execute(text(
            "INSERT INTO annotators (id, study_id, external_id, created_at, session_key) VALUES "
            "(1, 'a', 'ALICE', '2025-01-01', NULL), (2, 'a', 'alice', '2025-01-01', NULL), "
            "(3, 'a', 'Bob', '2025-01-01', NULL), (4, 'b', 'alice', '2025-01-01', NULL)"))
    engine.dispose()
    store = StudyStore(url)
    with store.engine.connect() as conn:
        keys = dict(conn.execute(text("SELECT id, match_key FROM annotators")).all())
        links = [r[0] for r in conn.execute(text("SELECT link_key FROM studies"))]
    assert keys[1] == "alice" and keys[3] == "bob" and keys[4] == "alice"
    assert keys[2].startswith("alice\x1f")  # the younger twin keeps its votes under a key no typed id reaches
    assert len(set(links)) == 2 and all(len(k) >= 16 for k in links)
    assert store.progress(study_id="a", annotator="Alice").done == 0  # finds the oldest, no error
    store.close()


def test_cli_prints_the_link_and_can_replace_its_key(store):
    out = io.StringIO()
    old = key(store)
    assert main(["--db", str(store.engine.url), "link", "--study", "s1"], out=out) == 0
    assert f"?study=s1&key={old}&annotator=ANNOTATOR_ID" in out.getvalue() and "{{%PROLIFIC_PID%}}" in out.getvalue()
    taking_part = store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=old)
    out = io.StringIO()
    assert main(["--db", str(store.engine.url), "link", "--new-key", "--study", "s1"], out=out) == 0
    assert key(store) != old and f"key={key(store)}" in out.getvalue()
    with pytest.raises(LinkKeyInvalid):
        store.next_task(study_id="s1", annotator="P2", session_key="c", link_key=old)
    resumed = store.next_task(study_id="s1", annotator="P1", session_key="b", link_key=old)
    assert resumed.token == taking_part.token  # those already taking part continue
