"""Shared fixtures: fake backend, persona packs, a tiny offline model, free ports, headless Chromium."""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from mascot.backends.fake import FakeBackend  # noqa: E402
from mascot.group.personas import PersonaPack, load_pack  # noqa: E402
from mascot.settings import apply_process_defaults  # noqa: E402

apply_process_defaults()  # as every entry point does, before torch starts its thread pool

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A child process left running is killed and fails its test: multiprocessing joins every child at exit,
    so a single stuck one used to hang the whole run after its summary."""
    yield
    left = multiprocessing.active_children()
    for child in left:
        child.kill()
        child.join(timeout=10)
    if left:
        pytest.fail(f"the test left {len(left)} child process(es) running: {[c.name for c in left]}")


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def es_pack() -> PersonaPack:
    return load_pack("emotional-support").copy()


@pytest.fixture
def meeting_pack() -> PersonaPack:
    return load_pack("meeting").copy()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def run_uvicorn(app: object, port: int) -> tuple[object, threading.Thread]:
    """Serve a FastAPI app on 127.0.0.1:port in a thread; returns (server, thread)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for_port(port)
    return server, thread


@contextmanager
def served(settings: object, engine: object | None = None) -> Iterator[str]:
    """The server of `settings` (public, /annotate, /admin) on `settings.port`, over `engine` (default: a fake
    backend); yields its base URL and stops it afterwards."""
    from app.server import build_server
    from mascot.group.engine import Engine, EngineConfig

    engine = engine or Engine(EngineConfig(backend="fake"), FakeBackend())
    server, _ = run_uvicorn(build_server(settings, engine), settings.port)  # type: ignore[arg-type, attr-defined]
    try:
        yield f"http://127.0.0.1:{settings.port}"  # type: ignore[attr-defined]
    finally:
        server.should_exit = True  # type: ignore[attr-defined]


@contextmanager
def new_page(browser: object) -> Iterator[object]:
    """A fresh browser page, closed afterwards."""
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        page.close()


def open_chat(page: object, base: str) -> None:
    """Open the public chat page at `base` and wait until its message box is there."""
    page.goto(f"{base}/")  # type: ignore[attr-defined]
    page.locator("#msg textarea").wait_for(timeout=60_000)  # type: ignore[attr-defined]


def send_message(page: object, text: str) -> None:
    """Type `text` into the chat's message box and press Send."""
    page.locator("#msg textarea").fill(text)  # type: ignore[attr-defined]
    page.locator("#send").click()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[object]:
    """A throwaway PostgreSQL cluster on a local socket for the whole session, stopped at the end (tests/postgres_cluster.py)."""
    from tests.postgres_cluster import PostgresCluster

    try:
        cluster = PostgresCluster().start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def annotation_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs an annotation test once on SQLite files and once on the PostgreSQL cluster (`make_store`, `store_url`)."""
    from tests import annotation_fixtures

    annotation_fixtures.DATABASE["cluster"] = request.getfixturevalue("postgres_cluster") if request.param == "postgresql" else None
    try:
        yield request.param
    finally:
        annotation_fixtures.DATABASE["cluster"] = None


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's headless Chromium driven by Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make test` (it installs Debian's chromium) or apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised Llama (hidden 16, 2 layers) with the embedded model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from mascot.files.model_files import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("embedded", progress=False))
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=2,
                      intermediate_size=32, vocab_size=len(tok), max_position_embeddings=2048,
                      pad_token_id=tok.pad_token_id or tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.bos_token_id)
    model = LlamaForCausalLM(cfg)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
