"""Real-model tests of the transformers backend (tiny random Llama) and the HTTP backend."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import torch

from mascot.backends import GenerationParams, load_backend
from mascot.backends.fake import FakeBackend
from mascot.backends.transformers_backend import TransformersBackend
from mascot.errors import BackendError, ConfigError

MSG = [{"role": "user", "content": "hello there"}]
GREEDY = GenerationParams(max_new_tokens=8, temperature=0.0)


def make_lora(base_dir: Path, out: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.normal_(0, 2.0)
    peft.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_backend(tiny_model_dir: Path) -> TransformersBackend:
    return TransformersBackend(str(tiny_model_dir), dtype="float32")


def test_generate_batched_and_stream_agree(tiny_backend):
    outs = tiny_backend.generate([MSG, MSG + [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]], GREEDY)
    assert len(outs) == 2 and all(o.completion_tokens > 0 for o in outs)
    streamed = "".join(tiny_backend.stream(MSG, GREEDY))
    assert streamed == outs[0].text


def test_switch_between_two_adapters_on_one_base(tiny_backend, tiny_model_dir, tmp_path):
    a = make_lora(tiny_model_dir, tmp_path / "a", seed=1)
    b = make_lora(tiny_model_dir, tmp_path / "b", seed=2)
    base_before = tiny_backend.generate([MSG], GREEDY)[0].text
    tiny_backend.add_adapter("speaker-a", str(a))
    tiny_backend.add_adapter("speaker-b", str(b))
    ta = tiny_backend.generate([MSG], GREEDY, adapter="speaker-a")[0].text
    tb = tiny_backend.generate([MSG], GREEDY, adapter="speaker-b")[0].text
    base_after = tiny_backend.generate([MSG], GREEDY)[0].text
    assert ta != tb, "two different adapters must change the output"
    assert base_after == base_before, "adapter=None must be the untouched base model"
    assert tiny_backend.generate([MSG], GREEDY, adapter="speaker-a")[0].text == ta  # switching back is exact
    # one base model in memory: both adapters live in the same PeftModel
    assert set(tiny_backend.model.peft_config) == {"speaker-a", "speaker-b"}
    with pytest.raises(BackendError, match="not loaded"):
        tiny_backend.generate([MSG], GREEDY, adapter="nope")


def test_bad_adapter_paths(tiny_backend, tmp_path):
    with pytest.raises(BackendError, match="not a PEFT adapter"):
        tiny_backend.add_adapter("x", str(tmp_path))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "base_model_name_or_path": "other"}))
    torch.save({}, bad / "adapter_model.bin")
    from safetensors.torch import save_file

    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 999)}, bad / "adapter_model.safetensors")
    with pytest.raises(BackendError, match="does not fit"):
        tiny_backend.add_adapter("y", str(bad))


def test_unknown_backend_lists_names():
    with pytest.raises(ConfigError, match="auto, fake, llamacpp, openai, transformers, vllm"):
        load_backend("nope")


def test_vllm_is_not_imported_on_cpu():
    import sys

    import mascot.backends  # noqa: F401
    assert "vllm" not in sys.modules


class _FakeOpenAI(BaseHTTPRequestHandler):
    def log_message(self, *a):  # silence
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in ["Hel", "lo ", "there"]:
                self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {'content': piece}}]})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        text = f"reply from {body['model']}"
        data = {"choices": [{"message": {"content": text}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def test_openai_backend_sends_adapter_as_model_and_streams():
    _FakeOpenAI.requests = []
    srv = HTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        be = load_backend("openai", model="base-model", base_url=f"http://127.0.0.1:{srv.server_port}/v1")
        be.adapters["speaker-anchor"] = "/x"
        assert be.generate([MSG], GREEDY, adapter="speaker-anchor")[0].text == "reply from speaker-anchor"
        assert be.generate([MSG], GREEDY.with_(prefill='{"speaker": "'))[0].text == "reply from base-model"
        assert _FakeOpenAI.requests[1]["continue_final_message"] is True
        assert "".join(be.stream(MSG, GREEDY)) == "Hello there"
    finally:
        srv.shutdown()
        srv.server_close()
    with pytest.raises(BackendError, match="Cannot reach"):
        be.generate([MSG], GREEDY)


@pytest.mark.model
def test_embedded_model_streams_real_text():
    be = load_backend("transformers")
    assert be.info().dtype == "bfloat16"
    text = "".join(be.stream([{"role": "user", "content": "Say hello in five words."}], GenerationParams(max_new_tokens=12, seed=0)))
    assert len(text.split()) >= 2


def test_the_llamacpp_path_imports_no_training_stack():
    """Chat on llama.cpp starts without torch, transformers, peft or scipy (seconds of start-up), and the
    registry and the build probe import neither numpy nor llama_cpp."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import mascot.backends, mascot.backends.llamacpp.probe\n"
            "light = sorted(m for m in ('numpy', 'llama_cpp') if m in sys.modules)\n"
            "import mascot.backends.llamacpp.backend\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'peft', 'scipy') if m in sys.modules)\n"
            "print(light, heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr


def test_default_generate_prefilled_calls_once_per_prefill_and_keeps_order():
    fake = FakeBackend(responder=lambda m, p, a: f"{p.prefill}|{m[-1]['content']}|{p.seed}")
    chats = [([{"role": "user", "content": str(i)}], stem) for i, stem in enumerate(["A", "B", "A", "C"])]
    out = fake.generate_prefilled(chats, GenerationParams(seed=5), adapter="x")
    assert [c.text for c in out] == ["A|0|5", "B|1|5", "A|2|5", "C|3|5"]
    assert [c.params.prefill for c in fake.calls] == ["A", "A", "B", "C"]  # grouped: one generate per prefill
    assert {c.adapter for c in fake.calls} == {"x"}
    assert fake.generate_prefilled([], GenerationParams()) == []


def test_the_vllm_serve_command_names_each_adapter_as_the_openai_backend_asks_for_it(tmp_path):
    from mascot.backends.openai_backend import OpenAIBackend
    from mascot.backends.vllm_serve import main, serve_command
    from mascot.errors import ConfigError
    from mascot.group.personas import load_pack
    from mascot.group.speaker import adapter_name

    argv = serve_command(Path("checkpoints/tiny-cpu"))
    assert argv[:3] == ["vllm", "serve", "HuggingFaceTB/SmolLM2-135M-Instruct"] and "--enable-lora" in argv
    modules = dict(m.split("=", 1) for m in argv[argv.index("--lora-modules") + 1:])
    pack = load_pack("emotional-support")
    assert set(modules) == {adapter_name(p) for p in pack.active} | {"director"}
    backend = OpenAIBackend(model="base", base_url="http://127.0.0.1:9/v1")
    sent = backend._payload([{"role": "user", "content": "hi"}], GenerationParams(), adapter_name(pack.active[0]), False)
    assert sent["model"] in modules  # the name the app sends is one the server serves
    with pytest.raises(ConfigError, match="holds no adapter"):
        serve_command(tmp_path)
    assert main(["--run", str(tmp_path)]) == 2
