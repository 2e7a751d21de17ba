"""Per-client limits on the public chat: one model call per client address at a time (others refused at once with a
plain "busy, try again" sentence), a cap on all calls, and the model's events started without Gradio's queue of
one, so a client flooding `/chat` cannot make everyone wait behind its calls."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest

from app.chat_limits import BUSY_MESSAGE, FULL_MESSAGE, MODEL_EVENTS, ChatLimits, client_of, stop_flag
from app.settings import Settings
from app.ui import build_app
from mascot.backends.fake import FakeBackend
from mascot.errors import ConfigError
from mascot.group.engine import Engine, EngineConfig
from tests.conftest import free_port, served


def req(host: str) -> SimpleNamespace:
    return SimpleNamespace(client=SimpleNamespace(host=host))


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def test_one_call_per_client_in_arrival_order_and_a_cap_on_all() -> None:
    limits = ChatLimits(per_client=1, max_waiting=2)
    ran: list[str] = []
    release = threading.Event()

    def call(host: str, tag: str) -> None:
        with limits.hold(req(host)):
            ran.append(tag)
            release.wait(10)

    first = threading.Thread(target=call, args=("198.51.100.1", "A"))
    first.start()
    _until(lambda: ran == ["A"])
    with pytest.raises(gr.Error) as busy, limits.hold(req("198.51.100.1")):
        pass
    assert busy.value.message == BUSY_MESSAGE  # the same client again: refused at once
    second = threading.Thread(target=call, args=("198.51.100.2", "B"))
    second.start()
    _until(lambda: limits.in_flight() == 2)
    with pytest.raises(gr.Error) as full, limits.hold(req("198.51.100.3")):
        pass
    assert full.value.message == FULL_MESSAGE  # two running or waiting in all
    assert ran == ["A"] and limits.in_flight("198.51.100.2") == 1  # B waits for the model, not beside A
    release.set()
    first.join(5)
    second.join(5)
    assert ran == ["A", "B"] and limits.in_flight() == 0
    with pytest.raises(RuntimeError), limits.hold(req("198.51.100.1")):
        raise RuntimeError("the model failed")
    assert limits.in_flight() == 0  # a failed call gives its place back


def test_a_call_that_waits_too_long_gives_up_plainly() -> None:
    limits = ChatLimits(per_client=1, max_waiting=8, wait_timeout_s=0.2)
    with limits.hold(req("a")):
        waiter_error: list[str] = []

        def wait() -> None:
            try:
                with limits.hold(req("b")):
                    pass
            except gr.Error as exc:
                waiter_error.append(exc.message)

        t = threading.Thread(target=wait)
        t.start()
        t.join(5)
        assert waiter_error == [FULL_MESSAGE] and limits.in_flight() == 1
    assert limits.in_flight() == 0
    off = ChatLimits(per_client=0)
    with off.hold(req("a")), off.hold(req("a")), off.hold(req("a")):
        assert not off.enabled


def test_client_address_and_stop_flags() -> None:
    assert client_of(req("203.0.113.9")) == "203.0.113.9"
    assert client_of(SimpleNamespace(request=req("203.0.113.8"))) == "203.0.113.8"
    assert client_of(None) == "?"
    flags: dict[str, threading.Event] = {}
    with stop_flag(flags, "s1") as flag:
        assert flags["s1"] is flag
    assert flags == {}


def test_settings_are_checked() -> None:
    assert Settings.from_env({"MASCOT_CHAT_PER_CLIENT": "2"}).chat_per_client == 2
    for bad in ({"chat_per_client": -1}, {"chat_max_waiting": 0}):
        with pytest.raises(ConfigError, match="MASCOT_CHAT"):
            Settings(**bad)


def _engine(backend: FakeBackend | None = None) -> Engine:
    return Engine(EngineConfig(backend="fake"), backend or FakeBackend())


def test_only_the_model_events_skip_the_queue(tmp_path) -> None:
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", warmup=False)
    demo = build_app(settings, _engine())
    ungated = {fn.name for fn in demo.fns.values() if fn.concurrency_limit is None}
    assert ungated == MODEL_EVENTS
    api = next(fn for fn in demo.fns.values() if fn.api_name == "chat")
    assert [i.label for i in api.inputs] == ["1st", "2nd", "3rd", "4th", "5th", "6th"]  # request is not an input
    settings.chat_per_client = 0  # switched off: Gradio's queue of one, as before
    assert not any(fn.concurrency_limit is None for fn in build_app(settings, _engine()).fns.values())


@pytest.mark.live
def test_a_flooding_client_is_refused_and_others_are_served(tmp_path) -> None:
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    model = threading.Lock()  # one model: one reply at a time, 1 s each

    def slow(messages, params, adapter):
        with model:
            time.sleep(1.0)
        return "a slow reply"

    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=free_port(), warmup=False,
                        trusted_proxies="127.0.0.1",  # clients named by X-Forwarded-For, as behind a proxy
                        replies="fast")  # one draw a reply: the timings below count replies of 1 s
    with served(settings, _engine(FakeBackend(responder=slow))) as base:
        flooder = Client(base, headers={"X-Forwarded-For": "198.51.100.1"}, verbose=False)
        other = Client(base, headers={"X-Forwarded-For": "198.51.100.2"}, verbose=False)
        args = dict(message="hello", history=[], pack="meeting", mode="round-robin", max_speakers=1, seed=0,
                    api_name="/chat")

        def call(client: Client) -> tuple[str, float]:
            start = time.perf_counter()
            try:
                client.predict(**args)
                return "ok", time.perf_counter() - start
            except AppError as exc:  # refused once running (a race with the early refusal)
                return str(exc), time.perf_counter() - start
            except httpx.HTTPStatusError as exc:  # refused before Gradio's queue: 429 with the sentence
                assert exc.response.status_code == 429 and exc.response.headers["Retry-After"]
                return exc.response.json()["detail"], time.perf_counter() - start

        assert call(other)[0] == "ok"  # warm: the first call pays one-off costs
        with ThreadPoolExecutor(6) as pool:
            floods = [pool.submit(call, flooder) for _ in range(5)]
            time.sleep(0.2)
            mine = pool.submit(call, other)
            results = [f.result() for f in floods]
            outcome, waited = mine.result()
        refused = [t for msg, t in results if msg != "ok"]
        [served_in] = [t for msg, t in results if msg == "ok"]
        assert len(refused) == 4 and all(BUSY_MESSAGE in msg for msg, _ in results if msg != "ok"), results
        assert max(refused) < served_in  # refused at once, not after waiting for the model
        # Behind one flood call at most (behind all five, as with a queue of one, would be 5 s or more).
        assert outcome == "ok" and waited < 4.0, (outcome, waited)
        # The REST routes too: while the flooder's call runs, its next one is refused before the queue.
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(call, flooder)
            time.sleep(0.5)
            r = httpx.post(f"{base}/gradio_api/run/chat", headers={"X-Forwarded-For": "198.51.100.1"},
                           json={"data": ["hi", [], "meeting", "round-robin", 1, 0]}, timeout=30)
            assert r.status_code == 429 and r.json()["detail"] == BUSY_MESSAGE
            assert running.result()[0] == "ok"
