"""Reliability on SQLite: 16 concurrent writers lose nothing and duplicate nothing; a SIGKILL mid-write
leaves a consistent database."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from annotation.frames import load_judgments
from annotation.schemas import Task
from annotation.store import StudyStore
from tests.annotation_fixtures import make_store, seed_study, store_url

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL

WRITERS = 16


def _drain(
    store: StudyStore, annotator: str, results: list, barrier: threading.Barrier | None = None
) -> None:
    if barrier is not None:
        barrier.wait()
    while isinstance(task := store.next_task(study_id="s1", annotator=annotator), Task):
        results.append(store.submit(token=task.token, choice="A"))


def test_16_threads_share_one_store_without_loss_or_duplicates(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=40, annotators_per_item=2)
    results: list = []
    barrier = threading.Barrier(WRITERS)
    threads = [
        threading.Thread(target=_drain, args=(store, f"p{n}", results, barrier)) for n in range(WRITERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    frame = load_judgments(store, study_id="s1")
    assert len(results) == len(frame) == 80 and not any(r.duplicate for r in results)
    assert Counter(frame.item_id) == {f"i{n}": 2 for n in range(40)}
    assert not frame.duplicated(["item_id", "annotator"]).any()


def test_16_concurrent_submits_of_one_task_record_once(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    task = store.next_task(study_id="s1", annotator="clicker")
    barrier = threading.Barrier(WRITERS)
    results: list = []

    def click() -> None:
        barrier.wait()
        results.append(store.submit(token=task.token, choice="B"))

    threads = [threading.Thread(target=click) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == WRITERS
    assert sum(not r.duplicate for r in results) == 1
    assert len({r.judgment_id for r in results}) == 1
    assert len(load_judgments(store, study_id="s1")) == 1


def _context() -> mp.context.BaseContext:
    """Writers start from a fork server: a plain fork of pytest copies its threads' held locks (a child can hang
    forever) and its open pipes (one left alive kept the browser driver, and so the whole run, from exiting)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _run_processes(target, annotators: list, url: str) -> None:  # type: ignore[no-untyped-def]
    """One process per entry of `annotators`, all starting together; each must exit cleanly within the deadline.
    Any still running at the deadline is killed, so a failure never leaves a writer behind."""
    ctx = _context()
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(url, a, start), daemon=True) for a in annotators]
    try:
        for p in procs:
            p.start()
        start.set()
        deadline = time.monotonic() + 180
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [a for a, p in zip(annotators, procs, strict=True) if p.exitcode is None]
        assert not stuck, f"writers still running after 180 s: {stuck}"
        assert [p.exitcode for p in procs] == [0] * len(procs)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)


def _process_writer(url: str, annotators: list[str], start: Any) -> None:
    store = StudyStore(url)  # each process: its own engine and connections
    start.wait()
    threads = [threading.Thread(target=_drain, args=(store, a, [])) for a in annotators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_16_writers_across_processes(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=30, annotators_per_item=3)
    _run_processes(_process_writer, [[f"w{n}a", f"w{n}b"] for n in range(WRITERS // 2)], store_url(tmp_path))
    frame = load_judgments(store, study_id="s1")
    assert Counter(frame.item_id) == {f"i{n}": 3 for n in range(30)}
    assert not frame.duplicated(["item_id", "annotator"]).any()


def _endless_writer(url: str, writing: Any) -> None:
    """Vote forever with a pause inside every transaction, so a kill lands mid-write."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    event.listen(Session, "after_flush", lambda *_: time.sleep(0.004))
    store = StudyStore(url)
    writing.set()
    n = 0
    while True:
        n += 1
        task = store.next_task(study_id="s1", annotator=f"k{n}")
        if isinstance(task, Task):
            store.submit(token=task.token, choice="A", comment="x" * 2000)


def _check_consistent(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as raw:
            if url.startswith("sqlite"):
                assert raw.execute(text("PRAGMA integrity_check")).fetchone()[0] == "ok"
                assert raw.execute(text("PRAGMA foreign_key_check")).fetchall() == []
            # A judgment and its assignment's "done" status are written in one transaction: both or neither.
            orphans = raw.execute(text(
                "SELECT count(*) FROM assignments a LEFT JOIN judgments j ON j.assignment_id = a.id "
                "WHERE (a.status = 'done') != (j.id IS NOT NULL)"
            )).fetchone()[0]
            assert orphans == 0
            # The per-item judgment counter moves in the same transaction as the judgment itself.
            drift = raw.execute(text(
                "SELECT count(*) FROM items i WHERE i.n_done != (SELECT count(*) FROM judgments j WHERE j.item_id = i.id)"
            )).fetchone()[0]
            assert drift == 0
            assert raw.execute(text("SELECT count(*) FROM judgments WHERE length(comment) != 2000")).fetchone()[0] == 0
            return raw.execute(text("SELECT count(*) FROM judgments")).fetchone()[0]
    finally:
        engine.dispose()


@pytest.mark.parametrize("delay", [0.6, 0.9, 1.3])
def test_sigkill_mid_write_leaves_a_consistent_database(tmp_path, delay):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=3000, annotators_per_item=1)
    store.close()
    url = store_url(tmp_path)
    ctx = _context()
    writing = ctx.Event()
    proc = ctx.Process(target=_endless_writer, args=(url, writing), daemon=True)
    proc.start()
    try:
        assert writing.wait(timeout=120), "the writer never opened the store"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL
    written = _check_consistent(url)
    assert written > 0, "the writer should have committed some judgments before the kill"
    # The database stays usable: a fresh store serves and records new votes.
    fresh = StudyStore(url)
    task = fresh.next_task(study_id="s1", annotator="after-crash")
    assert not fresh.submit(token=task.token, choice="B", comment="y" * 2000).duplicate
    assert _check_consistent(url) == written + 1


def _page_cycle_writer(url: str, annotator: str, start: Any) -> None:
    """One annotator clicking through the page: each vote and the next task in one transaction (submit_and_next)."""
    store = StudyStore(url)
    start.wait()
    task = store.next_task(study_id="s1", annotator=annotator)
    while isinstance(task, Task):
        _, task = store.submit_and_next(token=task.token, choice="A")


def test_16_processes_voting_through_the_page_cycle(tmp_path):
    # on PostgreSQL, a vote that locked rows before the study row deadlocked against the next serving transaction
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=40, annotators_per_item=4)
    _run_processes(_page_cycle_writer, [f"c{n}" for n in range(WRITERS)], store_url(tmp_path))
    frame = load_judgments(store, study_id="s1")
    assert Counter(frame.item_id) == {f"i{n}": 4 for n in range(40)}
    assert not frame.duplicated(["item_id", "annotator"]).any()
