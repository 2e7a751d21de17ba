"""Assignment: exactly k per item, never twice, least-annotated first, expiring holds, quotas, checks."""

from __future__ import annotations

from collections import Counter

import pytest

from annotation.assignment import order_coin
from annotation.errors import HoldExpired
from annotation.frames import load_judgments
from annotation.schemas import Finished, Task
from tests.annotation_fixtures import FakeClock, make_store, seed_study

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL


def drain(store, annotator, study="s1", choice="A"):
    """Take and answer tasks until the annotator is finished; returns item ids in order."""
    seen = []
    while isinstance(task := store.next_task(study_id=study, annotator=annotator), Task):
        seen.append(task.left[0].text.split()[-1])  # "help <item id>"
        store.submit(token=task.token, choice=choice)
    return seen


def test_each_item_gets_exactly_k_annotators_and_never_twice(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=6, annotators_per_item=2)
    per_annotator = {f"p{n}": drain(store, f"p{n}") for n in range(5)}
    for items in per_annotator.values():
        assert len(items) == len(set(items)), "an annotator saw an item twice"
    counts = Counter(i for items in per_annotator.values() for i in items)
    assert counts == {f"i{n}": 2 for n in range(6)}
    # Two annotators did everything (6 each); the rest found nothing left.
    assert sorted(len(v) for v in per_annotator.values()) == [0, 0, 0, 6, 6]
    frame = load_judgments(store, study_id="s1")
    assert not frame.duplicated(["item_id", "annotator"]).any()


def test_least_annotated_items_come_first(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=4, annotators_per_item=3)
    first = drain(store, "p1")
    assert sorted(first) == ["i0", "i1", "i2", "i3"]
    # p2 takes two items, so those now have load 2; p3 must start with the two load-1 items.
    for _ in range(2):
        task = store.next_task(study_id="s1", annotator="p2")
        store.submit(token=task.token, choice="B")
    p2_items = set(load_judgments(store, study_id="s1").query("annotator == 'p2'").item_id)
    task = store.next_task(study_id="s1", annotator="p3")
    assert task.left[0].text.split()[-1] not in p2_items


def test_expired_hold_returns_to_the_pool(tmp_path):
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    seed_study(store, tmp_path, n_items=1, annotators_per_item=1, hold_minutes=10)
    slow = store.next_task(study_id="s1", annotator="slow")
    assert isinstance(store.next_task(study_id="s1", annotator="other"), Finished), "held item is reserved"
    clock.advance(minutes=11)
    fresh = store.next_task(study_id="s1", annotator="other")
    assert isinstance(fresh, Task), "an expired hold must return the item to the pool"
    store.submit(token=fresh.token, choice="A")
    # The slow annotator's late vote is refused: the single slot is taken.
    with pytest.raises(HoldExpired, match="another annotator"):
        store.submit(token=slow.token, choice="B")
    assert len(load_judgments(store, study_id="s1")) == 1
    assert isinstance(store.next_task(study_id="s1", annotator="slow"), Finished)


def test_expired_hold_is_renewed_when_the_slot_is_still_free(tmp_path):
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    seed_study(store, tmp_path, n_items=2, annotators_per_item=1, hold_minutes=5)
    task = store.next_task(study_id="s1", annotator="p1")
    clock.advance(minutes=30)
    assert store.next_task(study_id="s1", annotator="p1") == task  # same item, same sides
    assert store.submit(token=task.token, choice="A").duplicate is False


def test_late_vote_accepted_if_nobody_took_the_slot(tmp_path):
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    seed_study(store, tmp_path, n_items=1, annotators_per_item=1, hold_minutes=5)
    task = store.next_task(study_id="s1", annotator="p1")
    clock.advance(minutes=60)
    assert store.submit(token=task.token, choice="B").duplicate is False


def test_items_per_annotator_quota_and_progress(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=10, items_per_annotator=4)
    assert store.progress(study_id="s1", annotator="p1").label == "0 / 4"
    labels = []
    while isinstance(task := store.next_task(study_id="s1", annotator="p1"), Task):
        labels.append(task.progress.label)
        store.submit(token=task.token, choice="tie")
    assert labels == ["0 / 4", "1 / 4", "2 / 4", "3 / 4"]
    assert store.next_task(study_id="s1", annotator="p1").progress.label == "4 / 4"


def test_attention_checks_follow_the_rate_and_skip_k(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=9, checks=3, attention_rate=0.2, annotators_per_item=2)
    for person in ("p1", "p2"):
        items = drain(store, person)
        # 9 ordinary items at 20%: every fifth task is a check -> 11 tasks, checks 5th and 10th.
        assert len(items) == 11
        assert [n for n, i in enumerate(items) if i.startswith("check")] == [4, 9]
    frame = load_judgments(store, study_id="s1")
    # Both annotators may see the same check (k does not apply to checks).
    assert frame[frame.is_attention].groupby("item_id").size().max() == 2


def test_progress_total_matches_the_tasks_actually_served(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=6, checks=2, attention_rate=0.25)
    first = store.next_task(study_id="s1", annotator="p1")
    served = 1 + len(drain(store, "p1")) - 1  # drain resumes the held task first
    assert first.progress.total == served


def test_order_coin_is_deterministic_keyed_and_balanced():
    assert order_coin("k", "ann", "item") == order_coin("k", "ann", "item")
    coins = [order_coin("secret", f"a{n % 7}", f"i{n}") for n in range(2000)]
    assert 900 < sum(coins) < 1100
    other_key = [order_coin("other", f"a{n % 7}", f"i{n}") for n in range(2000)]
    assert coins != other_key


def test_no_checks_once_real_items_run_out(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=8, checks=3, attention_rate=0.2)
    items = drain(store, "p1")
    # The 10th task would be a check, but no ordinary item is left: the annotator is finished.
    assert len(items) == 9 and sum(i.startswith("check") for i in items) == 1
