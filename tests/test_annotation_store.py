"""StudyStore: schema via migrations, SQLite settings, vote mapping, idempotency, flags, blinding."""

from __future__ import annotations

import sqlite3

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from annotation.db import alembic_config, make_engine, migrate
from annotation.errors import InvalidInput, StudyClosed, StudyNotFound
from annotation.frames import load_judgments
from annotation.importing import import_pairs
from annotation.models import Base
from annotation.schemas import Finished, Ratings, StudyConfig, Task
from annotation.store import StudyStore
from tests.annotation_fixtures import FakeClock, make_store, pair_line, seed_study, write_jsonl

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL


def test_schema_comes_from_migrations_and_matches_models(tmp_path):
    store = make_store(tmp_path)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"models and migrations disagree: {diff}"
    # Re-opening an up-to-date database is a no-op, not an error.
    make_store(tmp_path).close()


def test_upgrade_from_first_revision_keeps_and_backfills_data(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    migrate(engine, "0001")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO studies (id, name, instructions, annotators_per_item, attention_rate, "
                "min_seconds, hold_minutes, order_secret, is_open, created_at) VALUES "
                "('old', 'old', '', 2, 0, 0, 30, 'k', 1, '2025-01-01')"
            )
        )
        conn.execute(text("INSERT INTO systems (id, study_id, name) VALUES (1, 'old', 'X'), (2, 'old', 'Y')"))
        conn.execute(
            text(
                "INSERT INTO items (id, study_id, external_id, context, system_a_id, system_b_id, "
                "dialogue_a, dialogue_b, is_attention, leak_terms, meta) VALUES "
                "(1, 'old', 'i1', '', 1, 2, '[]', '[]', 0, '', '{}')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO annotators (id, study_id, external_id, created_at) VALUES (1, 'old', 'u', '2025-01-01')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO assignments (id, token, study_id, item_id, annotator_id, status, served_at, "
                "expires_at) VALUES (1, 't', 'old', 1, 1, 'done', '2025-01-01', '2025-01-01')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO judgments (assignment_id, study_id, item_id, annotator_id, choice, comment, "
                "too_fast, source, created_at) VALUES (1, 'old', 1, 1, 'a', '', 0, 'app', '2025-01-01')"
            )
        )
    engine.dispose()
    store = StudyStore(url)  # opening migrates to head
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT n_done FROM items WHERE id = 1")).scalar() == 1
    assert store.overview(study_id="old").judgments == 1


@pytest.mark.parametrize("annotation_db", ["sqlite"], indirect=True)  # SQLite's own settings
def test_sqlite_runs_in_wal_with_foreign_keys(tmp_path):
    store = make_store(tmp_path)
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 10_000


def test_create_study_validates_and_rejects_duplicates(tmp_path):
    store = make_store(tmp_path)
    store.create_study(config=StudyConfig(id="ed-1", name="ED", annotators_per_item=3, completion_code="XYZ"))
    got = store.get_study(study_id="ed-1")
    assert (got.name, got.annotators_per_item, got.completion_code, got.is_open) == ("ED", 3, "XYZ", True)
    with pytest.raises(InvalidInput, match="already exists"):
        store.create_study(config=StudyConfig(id="ed-1"))
    with pytest.raises(InvalidInput, match="study id"):
        StudyConfig(id="bad id with spaces")
    with pytest.raises(InvalidInput, match="attention_rate"):
        StudyConfig(id="x", attention_rate=1.5)
    with pytest.raises(StudyNotFound, match="ed-1"):
        store.get_study(study_id="nope")
    assert [s.id for s in store.list_studies()] == ["ed-1"]


def _vote_all(store, annotator, choice="A", **kw):
    """Vote `choice` on every task for `annotator`; returns the tasks seen."""
    tasks = []
    while isinstance(task := store.next_task(study_id="s1", annotator=annotator), Task):
        tasks.append(task)
        store.submit(token=task.token, choice=choice, **kw)
    return tasks


def test_shown_choice_maps_back_to_the_right_system(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=12)
    tasks = _vote_all(store, "p1", choice="A", left=Ratings(helpfulness=5), right=Ratings(helpfulness=2))
    frame = load_judgments(store, study_id="s1")
    assert len(frame) == 12
    for task, row in zip(tasks, frame.itertuples()):
        left_is_a = "side-a reply" in task.left[1].text
        # "A" is the left response, so the winner is whichever system was shown on the left.
        assert row.winner == ("MASCOT" if left_is_a else "Few-Shot CoT")
        assert row.left_system == row.winner
        assert row.choice == ("a" if left_is_a else "b")
        # Ratings given to the left response land on the left system's side.
        assert (row.helpfulness_a, row.helpfulness_b) == ((5, 2) if left_is_a else (2, 5))
    # Sides are random per (annotator, item): both orders occur across 12 items.
    assert set(frame.left_system) == {"MASCOT", "Few-Shot CoT"}


def test_order_is_stable_across_reloads_and_recorded(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=3)
    first = store.next_task(study_id="s1", annotator="p1")
    again = store.next_task(study_id="s1", annotator="p1")  # a page reload
    assert again == first
    # A fresh store (server restart) still serves the same held task with the same sides.
    assert make_store(tmp_path).next_task(study_id="s1", annotator="p1") == first


def test_submit_is_idempotent(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=2)
    task = store.next_task(study_id="s1", annotator="p1")
    one = store.submit(token=task.token, choice="B")
    two = store.submit(token=task.token, choice="A")  # double click / retry with another value
    assert (one.duplicate, two.duplicate, two.judgment_id) == (False, True, one.judgment_id)
    frame = load_judgments(store, study_id="s1")
    assert len(frame) == 1 and frame.choice.iloc[0] in ("a", "b")
    with pytest.raises(InvalidInput, match="choice"):
        store.submit(token=task.token, choice="C")
    with pytest.raises(StudyNotFound, match="token"):
        store.submit(token="not-a-token", choice="A")


def test_timing_flag_and_attention_checks(tmp_path):
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    seed_study(store, tmp_path, n_items=4, checks=2, attention_rate=0.5, min_seconds=10)
    results = []
    while isinstance(task := store.next_task(study_id="s1", annotator="p1"), Task):
        clock.advance(seconds=3 if len(results) == 0 else 30)
        is_check = any("Please pick this response." in t.text for t in task.left + task.right)
        picked_left = any("Please pick this response." in t.text for t in task.left)
        # Answer checks wrongly the first time, correctly the second.
        wrong = is_check and not any(r[0] for r in results)
        choice = (
            ("B" if picked_left else "A") if wrong else ("A" if picked_left else "B") if is_check else "tie"
        )
        results.append((is_check, store.submit(token=task.token, choice=choice)))
    checks = [r for is_check, r in results if is_check]
    assert len(checks) == 2, "with rate 0.5 half of the tasks are attention checks"
    assert [r.attention_passed for r in checks] == [False, True]
    assert all(r.attention_passed is None for is_check, r in results if not is_check)
    assert results[0][1].too_fast and not any(r.too_fast for _, r in results[1:])
    o = store.overview(study_id="s1")
    assert (o.too_fast, o.attention_failed, o.attention_items, o.items) == (1, 1, 2, 4)


def test_tasks_never_carry_system_names(tmp_path):
    store = make_store(tmp_path)
    store.create_study(config=StudyConfig(id="s1", instructions="Compare the replies."))
    leaky = pair_line("leak", text_a="As MASCOT I think you should rest.", text_b="Few shot CoT answer here")
    import_pairs(store, study_id="s1", path=write_jsonl(tmp_path / "p.jsonl", [leaky]))
    task = store.next_task(study_id="s1", annotator="p1")
    blob = repr(task).lower()
    assert "mascot" not in blob and "few" not in blob and "cot" not in blob
    assert "[system]" in blob
    assert store.overview(study_id="s1").leak_items == 1


def test_closed_study_hands_out_nothing_new(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=3)
    held = store.next_task(study_id="s1", annotator="p1")
    store.set_open(study_id="s1", is_open=False)
    with pytest.raises(StudyClosed):
        store.next_task(study_id="s1", annotator="newcomer")
    # The annotator who holds an item can still finish it, then gets nothing more.
    assert store.next_task(study_id="s1", annotator="p1") == held
    store.submit(token=held.token, choice="A")
    assert isinstance(store.next_task(study_id="s1", annotator="p1"), Finished)


def test_finished_screen_carries_completion_code(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=2, completion_code="CODE-1")
    _vote_all(store, "p1")
    done = store.next_task(study_id="s1", annotator="p1")
    assert done == Finished(progress=done.progress, completion_code="CODE-1")
    assert done.progress.label == "2 / 2"


@pytest.mark.parametrize("annotation_db", ["sqlite"], indirect=True)  # SQLite's own settings
def test_cascade_and_constraints_hold_in_sqlite(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    path = str(store.engine.url.database)
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute(
                "INSERT INTO items (study_id, external_id, context, system_a_id, system_b_id, dialogue_a,"
                " dialogue_b, is_attention, leak_terms, meta) VALUES ('missing', 'x', '', 1, 2, '[]', '[]',"
                " 0, '', '{}')"
            )


def test_submit_and_next_records_and_serves_in_one_step(tmp_path):
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    seed_study(store, tmp_path, n_items=2, annotators_per_item=1, hold_minutes=5)
    first = store.next_task(study_id="s1", annotator="p1")
    result, second = store.submit_and_next(token=first.token, choice="A")
    assert not result.duplicate and isinstance(second, Task) and second.token != first.token
    assert second.progress.label == "1 / 2"
    again, same = store.submit_and_next(token=first.token, choice="B")  # a repeated click
    assert again.duplicate and same == second
    # A lapsed hold whose slot went to someone else: nothing recorded, and p1 is done.
    clock.advance(minutes=10)
    other = store.next_task(study_id="s1", annotator="p2")  # the only item left: the lapsed one
    store.submit(token=other.token, choice="B")
    lost, nxt = store.submit_and_next(token=second.token, choice="A")
    assert lost is None and isinstance(nxt, Finished) and nxt.progress.label == "1 / 1"
    assert len(load_judgments(store, study_id="s1")) == 2
