"""End to end in headless Chromium: an annotator opens the study by URL and votes on two items; the
votes land in the database with the right systems, and no system name ever reaches the browser."""

from __future__ import annotations

import re
import time

import gradio as gr
import httpx
import pytest
from fastapi import FastAPI

from annotation.frames import load_judgments
from annotation.importing import import_pairs
from annotation.schemas import StudyConfig
from app.annotate_page import build_annotate_page
from app.settings import Settings
from tests.annotation_fixtures import make_store, pair_line, write_jsonl
from tests.conftest import free_port, run_uvicorn

pytestmark = pytest.mark.browser
SYSTEMS = ("MASCOT", "Few-Shot CoT")
LEAK = re.compile(r"mascot|few.?shot|\bcot\b", re.IGNORECASE)


class Recorder:
    """ASGI middleware keeping every response body the server sends (streams included)."""

    def __init__(self, app) -> None:
        self.app = app
        self.bodies: list[tuple[str, bytes]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")

        async def tee(message):
            if message["type"] == "http.response.body":
                self.bodies.append((path, message.get("body", b"")))
            await send(message)

        return await self.app(scope, receive, tee)


@pytest.fixture
def server(tmp_path):
    """The annotate page mounted at /annotate of a FastAPI app (as the main server does), seeded."""
    store = make_store(tmp_path)
    store.create_study(
        config=StudyConfig(
            id="study1",
            name="MASCOT vs Few-Shot CoT (internal name)",
            instructions="Which reply is more supportive?",
            completion_code="XYZ-1",
        )
    )
    rows = [pair_line(f"item{n}", *SYSTEMS) for n in range(3)]
    import_pairs(store, study_id="study1", path=write_jsonl(tmp_path / "pairs.jsonl", rows))
    app = FastAPI()
    app = gr.mount_gradio_app(
        app, build_annotate_page(Settings(data_dir=str(tmp_path)), store=store), path="/annotate"
    )
    recorder = Recorder(app)
    port = free_port()
    srv, thread = run_uvicorn(recorder, port)
    yield f"http://127.0.0.1:{port}", store, recorder
    srv.should_exit = True
    thread.join(timeout=10)


def assert_no_leak(text: str, where: str) -> None:
    match = LEAK.search(text)
    assert match is None, (
        f"system name {match.group()!r} leaked in {where}: ...{text[max(0, match.start() - 80) : match.end() + 80]}..."
    )


def left_side(page) -> str:
    """Which pairs-file side ('a' or 'b') the browser shows as Response A, read from the DOM text."""
    body = page.inner_text("body")
    a_pos, b_pos = body.find("side-a reply"), body.find("side-b reply")
    assert a_pos >= 0 and b_pos >= 0, "both responses must be on the page"
    return "a" if a_pos < b_pos else "b"


def test_annotator_votes_blind_by_url(server, browser):
    base, store, recorder = server
    page = browser.new_page()
    captured: list[tuple[str, str]] = []

    def on_response(response):
        try:
            captured.append((response.url, response.text()))
        except Exception:  # streamed or binary bodies: covered by the server-side recorder
            pass

    page.on("response", on_response)
    page.goto(f"{base}/annotate/?study=study1&key={store.link_key(study_id='study1')}&annotator=P1")
    page.wait_for_selector("text=0 / 3", timeout=30_000)
    assert page.is_visible("text=Response A") and page.is_visible("text=Response B")
    assert_no_leak(page.content(), "page before any vote")
    first_left = left_side(page)

    # Vote 1: a double click on "A is better" must record once.
    page.dblclick("#vote-a")
    page.wait_for_selector("text=1 / 3", timeout=30_000)
    assert_no_leak(page.content(), "page after vote 1")
    second_left = left_side(page)

    # Reload: the same held task comes back, same sides.
    before = page.inner_text("body")
    page.reload()
    page.wait_for_selector("text=1 / 3", timeout=30_000)
    assert left_side(page) == second_left
    assert re.findall(r"side-[ab] reply item\d", page.inner_text("body")) == re.findall(
        r"side-[ab] reply item\d", before
    )

    # Vote 2 with the keyboard: "2" = B is better.
    page.click("h1")  # focus the page, not a text box
    page.keyboard.press("2")
    page.wait_for_selector("text=2 / 3", timeout=30_000)
    assert_no_leak(page.content(), "page after vote 2")
    time.sleep(0.5)

    frame = load_judgments(store, study_id="study1")
    assert len(frame) == 2, f"expected two votes, got {len(frame)}"
    first, second = frame.iloc[0], frame.iloc[1]
    system_of = {"a": SYSTEMS[0], "b": SYSTEMS[1]}
    other = {"a": "b", "b": "a"}
    assert first.left_system == system_of[first_left] and first.winner == system_of[first_left]
    assert second.left_system == system_of[second_left] and second.winner == system_of[other[second_left]]
    assert first.annotator == second.annotator == "P1"

    # The Gradio config and every byte the server sent never named a system.
    config = httpx.get(f"{base}/annotate/config", timeout=10)
    assert config.status_code == 200 and "vote-a" in config.text
    assert_no_leak(config.text, "/annotate/config")
    for url, text in captured:
        assert_no_leak(text, f"browser response {url}")
    # The recorder really saw the task payloads (dialogue text streamed over the queue).
    assert any("/queue/data" in path and b"side-a reply" in body for path, body in recorder.bodies)
    for path, body in recorder.bodies:
        assert_no_leak(body.decode("utf-8", "replace"), f"server response {path}")
    page.close()
