"""The `openai` backend against a real OpenAI-compatible server: llama-cpp-python's, on the embedded GGUF (the same
path a `vllm serve --enable-lora` deployment takes, without a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_port

pytestmark = [pytest.mark.model, pytest.mark.live]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from mascot.files.model_files import embedded_gguf

    port = free_port()
    log = tmp_path_factory.mktemp("openai") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()),
                                 "--port", str(port), "--n_ctx", "4096", "--n_threads", "2"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, timeout=120)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        proc.terminate()
        proc.wait(20)


def _chat(base_url: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "mascot", "chat", "--backend", "openai", "--base-url", base_url,
                           "--replies", "fast", "--json", "--message", "I failed my driving test again today.", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_the_group_answers_through_an_openai_compatible_server_without_adapters(server):
    base_url, log = server
    out = _chat(base_url, "--no-adapters")
    assert out.returncode == 0, out.stderr
    turns = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len({t["speaker"] for t in turns}) >= 2 and all(t["text"].strip() for t in turns)
    assert "the director runs prompted" in out.stderr and "could not load adapter" not in out.stderr
    assert "load_lora_adapter" not in log.read_text(errors="replace")  # nothing was asked of the server


def test_asking_a_server_without_runtime_lora_for_adapters_warns_and_still_answers(server):
    base_url, _ = server
    out = _chat(base_url, "--mode", "round-robin")
    assert out.returncode == 0, out.stderr
    assert "could not load adapter" in out.stderr and "--enable-lora" in out.stderr  # says how to serve them
    assert [json.loads(line)["text"] for line in out.stdout.splitlines() if line.strip()]
