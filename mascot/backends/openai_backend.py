"""OpenAI-compatible HTTP backend: any server speaking /v1/chat/completions, e.g.
`vllm serve BASE --enable-lora --lora-modules speaker-anchor=/path ...`. A persona's adapter name is
sent as the `model` field; with no adapter the base model name is used."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages, cut_at_stop
from mascot.errors import BackendError


class OpenAIBackend(Backend):
    """Chat completions over HTTP; adapters are names the server already serves (or hot-loads)."""

    kind = "openai"

    def __init__(self, model: str = "default", base_url: str = "http://127.0.0.1:8000/v1", api_key: str = "EMPTY",
                 timeout: float = 120.0) -> None:
        super().__init__()
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {api_key}"})

    def _payload(self, messages: Messages, params: GenerationParams, adapter: str | None, stream: bool) -> dict[str, Any]:
        msgs = list(messages)
        body: dict[str, Any] = {
            "model": adapter or self.model, "messages": msgs, "max_tokens": params.max_new_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "stream": stream,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty  # vLLM extension; others ignore it
        # top_k is not sent: OpenAI's API refuses unknown fields, and servers apply their own top-k default
        if params.prefill:  # vLLM: continue the assistant message instead of starting a new one
            msgs.append({"role": "assistant", "content": params.prefill})
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        try:
            r = self.client.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise BackendError(f"Cannot reach the OpenAI-compatible server at {self.base_url} ({exc}). Is it running?") from exc
        if r.status_code >= 400:
            raise BackendError(f"The server at {self.base_url} answered {r.status_code}: {r.text[:300]}")
        return r

    def _strip_prefill(self, text: str, prefill: str) -> str:
        return text[len(prefill):] if prefill and text.startswith(prefill) else text

    def generate(self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None) -> list[Completion]:
        out = []
        for messages in batch:
            data = self._post(self._payload(messages, params, adapter, stream=False)).json()
            choice = data["choices"][0]
            text = self._strip_prefill(choice["message"].get("content") or "", params.prefill)
            text, _ = cut_at_stop(text, params.stop)
            usage = data.get("usage") or {}
            out.append(Completion(text, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                                  choice.get("finish_reason") or "stop"))
        return out

    def stream(self, messages: Messages, params: GenerationParams, adapter: str | None = None) -> Iterator[str]:
        body = self._payload(messages, params, adapter, stream=True)
        try:
            with self.client.stream("POST", f"{self.base_url}/chat/completions", json=body) as r:
                if r.status_code >= 400:
                    raise BackendError(f"The server at {self.base_url} answered {r.status_code}: {r.read()[:300]!r}")
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    chunk = line[5:].strip()
                    if chunk == "[DONE]":
                        break
                    delta = json.loads(chunk)["choices"][0].get("delta", {}).get("content") or ""
                    if delta:
                        yield delta
        except httpx.HTTPError as exc:
            raise BackendError(f"Streaming from {self.base_url} failed ({exc}).") from exc

    def add_adapter(self, name: str, path: str) -> None:
        """Ask a vLLM server (with runtime LoRA updating on) to load the adapter under `name`."""
        r = self.client.post(f"{self.base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": path})
        if r.status_code >= 400 and "already" not in r.text.lower():
            raise BackendError(
                f"The server could not load adapter {name!r} from {path} ({r.status_code}: {r.text[:200]}). "
                "Start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or list it in --lora-modules."
            )
        self.adapters[name] = path

    def info(self) -> BackendInfo:
        return BackendInfo("openai", f"{self.model} @ {self.base_url}", "remote", "", dict(self.adapters))
