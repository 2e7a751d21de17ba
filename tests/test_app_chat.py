"""Handler tests of the chat tab (called directly, fake backend) and one gradio_client API test."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest

from app.chat_tab import ChatHandlers, render
from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.group.dialogue import Turn
from mascot.group.engine import Engine, EngineConfig


@pytest.fixture
def handlers(tmp_path: Path) -> ChatHandlers:
    engine = Engine(EngineConfig(backend="fake"), FakeBackend())
    return ChatHandlers(engine, Settings(data_dir=str(tmp_path), backend="fake"))


def send(h: ChatHandlers, session, text: str, mode: str = "round-robin", pick=None):
    _, preview, session, pending, notice = h.submit(text, session)
    assert notice == ""
    frames = list(h.respond(pending, session, mode, 3, pick or [], True))
    return frames[-1][0], session, frames


def test_submit_and_stream_render_named_personas(handlers):
    s = handlers.new_session()
    msgs, s, frames = send(handlers, s, "I feel lonely")
    assert len(frames) > 3  # streamed
    text = "\n".join(m["content"] for m in msgs if isinstance(m["content"], str))
    for name in ("Anchor", "Catalyst", "Beacon"):
        assert name in text
    titles = [m["metadata"]["title"] for m in msgs if m.get("metadata")]
    assert titles and all(t.startswith("🎬 Director →") for t in titles)


@pytest.mark.parametrize("text, fragment", [("   ", "empty"), ("x" * 4001, "limit is 4,000")], ids=["blank", "too-long"])
def test_bad_messages_are_not_sent(handlers, text, fragment):
    s = handlers.new_session()
    box, _, s, pending, notice = handlers.submit(text, s)
    assert fragment in notice and pending is None and box == gr.update()  # the text stays in the box
    assert list(handlers.respond(pending, s, "round-robin", 3, [], True)) == []
    assert s.dialogue.turns == [] and s.turns_sent == 0


def test_html_is_inert(handlers):
    s = handlers.new_session()
    msgs, s, _ = send(handlers, s, "<script>alert(1)</script><b>x</b>")
    assert msgs[0]["content"] == "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"
    assert "<script>" not in json.dumps(render(s))


def test_regenerate_same_seed_and_new_draw(handlers):
    s = handlers.new_session()
    msgs, s, _ = send(handlers, s, "hi", mode="random")
    speakers = [t.speaker for t in s.dialogue.turns]
    again = list(handlers.regenerate(s, "random", 3, [], True))[-1][1]
    assert [t.speaker for t in again.dialogue.turns] == speakers
    seeds = set()
    for _ in range(5):
        list(handlers.regenerate(s, "random", 3, [], True, new_draw=True))
        seeds.add(s.seed)
    assert len(seeds) > 1
    with pytest.raises(gr.Error, match="Nothing to regenerate"):
        list(handlers.regenerate(handlers.new_session(), "random", 3, [], True))


def test_manual_mode_uses_pick(handlers):
    s = handlers.new_session()
    _, s, _ = send(handlers, s, "hi", mode="manual", pick=["Beacon", "Anchor"])
    assert [t.speaker for t in s.dialogue.turns[1:]] == ["Beacon", "Anchor"]


def test_crisis_message_gets_fixed_reply(handlers):
    s = handlers.new_session()
    msgs, s, _ = send(handlers, s, "I don't want to live anymore")
    assert s.dialogue.turns[-1].speaker == "Safety" and "988" in msgs[-1]["content"]


def test_export_json_and_markdown(handlers):
    s = handlers.new_session()
    _, s, _ = send(handlers, s, "hello")
    doc = json.loads(Path(handlers.export(s, "json", "round-robin")).read_text())
    assert doc["pack"] == "emotional-support" and len(doc["dialogue"]["turns"]) == 4 and doc["mode"] == "round-robin"
    md = Path(handlers.export(s, "md", "round-robin")).read_text()
    assert "**You:** hello" in md and "Director → Anchor" in md
    with pytest.raises(gr.Error, match="empty"):
        handlers.export(handlers.new_session(), "json", "x")


def test_toggle_edit_add_persona(handlers):
    s = handlers.new_session()
    s, *_ = handlers.toggle_personas(["Anchor", "Action Guide"], s)
    assert [p.name for p in s.pack.active] == ["Anchor", "Action Guide"]
    s, *_ = handlers.save_persona("Anchor", "Anchor", "Listener", "Listen deeply.", "reflect", "advise", "calm", "", False, s)
    assert s.pack.get("Anchor").goal == "Listen deeply."
    s, *_ = handlers.save_persona("Anchor", "Sage", "Elder", "Offer perspective.", "", "", "slow", "", True, s)
    assert s.pack.get("Sage").enabled
    with pytest.raises(gr.Error, match="field 'goal'"):
        handlers.save_persona("Anchor", "Anchor", "Listener", "", "", "", "", "", False, s)
    _, s, _ = send(handlers, s, "@Sage hello")
    assert s.dialogue.turns[-1].speaker == "Sage"


def test_change_pack_resets_session(handlers):
    s = handlers.new_session()
    s2, chat, personas_update, *_ = handlers.change_pack("meeting", s)
    assert s2.pack.name == "meeting" and chat == [] and "Recorder" in personas_update["choices"]


@pytest.mark.live
def test_gradio_client_api(port, tmp_path):
    """The app served over HTTP answers a chat through gradio_client (fake backend)."""
    from gradio_client import Client

    from app.server import build_server
    from mascot.safety.detector import CrisisDetector
    from tests.conftest import run_uvicorn

    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port)
    # about the API, so the crisis tiers (tests/test_safety.py) are left to the pattern layer here
    engine = Engine(EngineConfig(backend="fake"), FakeBackend(), safety=CrisisDetector(use_classifier=False))
    server, _ = run_uvicorn(build_server(settings, engine), port)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        api = client.view_api(return_format="dict", print_info=False)
        assert api["named_endpoints"], "the chat events must be reachable through the API"
        assert list(api["named_endpoints"]) == ["/chat"], "the public API lists the chat endpoint only"
        turns = client.predict("I feel lonely", [], "emotional-support", "round-robin", 2, 0, api_name="/chat")
        assert [t["speaker"] for t in turns] == ["user", "Anchor", "Catalyst"]
        assert turns[1]["directive"]["speaker"] == "Anchor" and turns[1]["text"]
        more = client.predict("@Beacon and you?", turns, "emotional-support", "round-robin", 2, 0, api_name="/chat")
        assert len(more) == 5 and more[-1]["speaker"] == "Beacon"
    finally:
        server.should_exit = True


@pytest.mark.live
def test_annotate_only_and_auth(port, tmp_path):
    import httpx

    from app.server import build_server
    from tests.conftest import free_port, run_uvicorn

    settings = Settings(data_dir=str(tmp_path), backend="fake", annotate_only=True)
    server, _ = run_uvicorn(build_server(settings, Engine(EngineConfig(backend="fake"), FakeBackend())), port)
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=False)
        assert r.status_code in (302, 307) and r.headers["location"] == "/annotate/"
        assert httpx.get(f"http://127.0.0.1:{port}/annotate/").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/config").status_code == 404  # no researcher app
    finally:
        server.should_exit = True
    port2 = free_port()
    settings = Settings(data_dir=str(tmp_path), backend="fake", auth="lab:secret")
    server, _ = run_uvicorn(build_server(settings, Engine(EngineConfig(backend="fake"), FakeBackend())), port2)
    try:
        assert "Studies" not in httpx.get(f"http://127.0.0.1:{port2}/config").text
        assert httpx.get(f"http://127.0.0.1:{port2}/annotate/config").status_code == 200
    finally:
        server.should_exit = True
    with pytest.raises(ValueError, match="USER:PASSWORD"):
        Settings(auth="nocolon").auth_pair()


def test_restore_unsent_puts_a_refused_message_back_and_leaves_a_sent_one(handlers):
    session = handlers.new_session()
    box, chat = handlers.restore_unsent("I failed my exam.", session)
    assert box == "I failed my exam." and "I failed my exam." not in str(chat)
    session.dialogue.add(Turn("user", "I failed my exam."))
    assert handlers.restore_unsent("I failed my exam.", session) == (gr.update(), gr.update())


def test_a_conversation_keeps_the_run_that_was_live_when_it_started(tmp_path):
    import shutil
    from pathlib import Path

    from app.chat_tab import ChatHandlers
    from app.settings import Settings
    from mascot.group.engine import Engine, EngineConfig
    from tests.test_engine import _Adapters

    engine = Engine(EngineConfig(backend="fake"), _Adapters(), run_dir=Path("checkpoints/tiny-cpu"))
    h = ChatHandlers(engine, Settings(data_dir=str(tmp_path), backend="fake"))
    going = h.new_session()
    anchor = going.pack.get("Anchor")
    assert h._group(going, "trained", 3, True).speaker.adapter_for(anchor) == "speaker-anchor"
    shutil.copytree("checkpoints/tiny-cpu/speakers", tmp_path / "v1" / "speakers")
    engine.put_live(tmp_path / "v1")
    assert h._group(going, "trained", 3, True).speaker.adapter_for(anchor) == "speaker-anchor"  # unchanged mid-way
    fresh = h.new_session()
    assert h._group(fresh, "trained", 3, True).speaker.adapter_for(anchor) == "speaker-anchor@v1"
    assert "**Live run:** v1 (v1)" in h.status(fresh) and "**Live run:** tiny-cpu (v0)" in h.status(going)
    h.clear(going)  # a new conversation in the same browser takes the live run
    assert h._group(going, "trained", 3, True).speaker.adapter_for(anchor) == "speaker-anchor@v1"


@pytest.mark.parametrize("replies", ["careful", "fast"])
def test_the_api_answers_with_the_servers_reply_mode_as_a_new_page_does(tmp_path, replies):
    """The stateless /chat API and a new chat page get the same group: the server's reply mode (careful: best
    of N by the acceptability scorer, recorded in each turn's meta) and its persona stems."""
    engine = Engine(EngineConfig(backend="fake"), FakeBackend())
    h = ChatHandlers(engine, Settings(data_dir=str(tmp_path), backend="fake", replies=replies))
    assert h.new_session().replies == replies
    turns = h.api_chat("I lost my job today.", [], "emotional-support", "round-robin", 2, 0)
    said = [t for t in turns if t["speaker"] != "user"]
    assert said and all(("selection" in t["meta"]) == (replies == "careful") for t in said), said
