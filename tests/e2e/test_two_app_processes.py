"""Two app processes in front of one PostgreSQL study store (replicas behind a reverse proxy): annotators vote on
both at once in headless Chromium; no item is assigned beyond its k annotators, no judgment is lost or recorded
twice."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from annotation.frames import load_judgments
from tests import annotation_fixtures
from tests.annotation_fixtures import make_store, seed_study
from tests.conftest import free_port, wait_for_port

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.live]
ROOT = Path(__file__).resolve().parents[2]
ITEMS, K = 6, 2


def _app_process(port: int, url: str, data: Path) -> subprocess.Popen:
    env = {**os.environ, "MASCOT_ANNOTATION_DB_URL": url, "MASCOT_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "app.py", "--annotate-only", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)


FINISHED = "d => document.body.innerText.includes('Thank you') || document.body.innerText.includes('full')"


def _finished(page) -> bool:
    return bool(page.evaluate(f"({FINISHED})(null)"))


def _progress(page) -> str | None:
    bar = page.locator("[aria-valuenow]")
    return bar.first.get_attribute("aria-valuenow") if bar.count() else None


def _vote(page) -> None:
    """Vote A on the page's held task and wait until the next task (or the end) is shown."""
    done = _progress(page)
    page.click("#vote-a")
    page.wait_for_function(
        "d => { const e = document.querySelector('[aria-valuenow]'); "
        "return (e && e.getAttribute('aria-valuenow') !== d) || document.body.innerText.includes('Thank you') "
        "|| document.body.innerText.includes('full'); }", arg=done, timeout=60_000)


def test_annotators_on_two_app_processes_share_one_postgresql_store(browser, postgres_cluster, tmp_path):
    annotation_fixtures.DATABASE["cluster"] = postgres_cluster
    try:
        store = make_store(tmp_path)
        url = annotation_fixtures.store_url(tmp_path)
    finally:
        annotation_fixtures.DATABASE["cluster"] = None
    seed_study(store, tmp_path, n_items=ITEMS, annotators_per_item=K)
    ports = [free_port(), free_port()]
    procs = [_app_process(p, url, tmp_path / f"data{i}") for i, p in enumerate(ports)]
    try:
        for p in ports:
            wait_for_port(p, timeout=120)
        key = store.link_key(study_id="s1")
        # four annotators, two on each process, each holding a task at the same time; they vote in turns
        contexts = [browser.new_context() for _ in range(4)]
        pages = [c.new_page() for c in contexts]
        for i, page in enumerate(pages):
            page.goto(f"http://127.0.0.1:{ports[i % 2]}/annotate/?study=s1&key={key}&annotator=P{i}")
            page.wait_for_function(f"() => document.querySelector('#vote-a') || ({FINISHED})(null)", timeout=60_000)
        for _ in range(ITEMS * K):
            live = [p for p in pages if not _finished(p)]
            if not live:
                break
            for page in live:
                _vote(page)
        assert all(_finished(p) for p in pages)
        for c in contexts:
            c.close()
    finally:
        for proc in procs:
            os.killpg(proc.pid, 9)
            proc.wait(10)
    frame = load_judgments(store, study_id="s1")
    assert Counter(frame.item_id) == {f"i{n}": K for n in range(ITEMS)}  # every item exactly k times
    assert not frame.duplicated(["item_id", "annotator"]).any()
    assert set(frame.annotator) == {"P0", "P1", "P2", "P3"}  # the work was shared across both processes
