"""vLLM backend (GPU): one engine with multi-LoRA; each persona's adapter is a LoRARequest.

Imported only when chosen (`--backend vllm`), so CPU installs never import vllm.
Install with `pip install -r requirements-gpu.txt`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages, cut_at_stop
from mascot.errors import BackendError
from mascot.files.model_files import resolve_model


class VLLMBackend(Backend):
    """Offline `vllm.LLM` with LoRA enabled; adapters get stable integer ids (never reused)."""

    kind = "vllm"

    def __init__(self, model: str = "embedded", dtype: str = "auto", max_loras: int = 8, max_lora_rank: int = 64,
                 gpu_memory_utilization: float = 0.5) -> None:
        super().__init__()
        try:
            from vllm import LLM
        except ImportError as exc:
            raise BackendError("The vllm backend needs vLLM on a CUDA machine: pip install -r requirements-gpu.txt") from exc
        self.model_name = model
        self.llm = LLM(model=resolve_model(model), dtype=dtype, enable_lora=True, max_loras=max_loras,
                       max_lora_rank=max_lora_rank, gpu_memory_utilization=gpu_memory_utilization)
        self._ids: dict[str, int] = {}

    def add_adapter(self, name: str, path: str) -> None:
        self._ids.setdefault(name, len(self._ids) + 1)
        self.adapters[name] = path

    def _lora(self, adapter: str | None) -> Any:
        if adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        if adapter not in self.adapters:
            raise BackendError(f"Adapter {adapter!r} is not loaded. Loaded: {', '.join(self.adapters) or 'none'}.")
        return LoRARequest(adapter, self._ids[adapter], self.adapters[adapter])

    def generate(self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None) -> list[Completion]:
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or -1,
                            seed=params.seed, stop=list(params.stop) or None, repetition_penalty=params.repetition_penalty)
        chats = [list(m) + ([{"role": "assistant", "content": params.prefill}] if params.prefill else []) for m in batch]
        outs = self.llm.chat(chats, sp, lora_request=self._lora(adapter), use_tqdm=False,
                             add_generation_prompt=not params.prefill, continue_final_message=bool(params.prefill))
        results = []
        for o in outs:
            c = o.outputs[0]
            text, _ = cut_at_stop(c.text, params.stop)
            results.append(Completion(text, len(o.prompt_token_ids or []), len(c.token_ids), c.finish_reason or "stop"))
        return results

    def info(self) -> BackendInfo:
        return BackendInfo("vllm", self.model_name, "cuda", "", dict(self.adapters))
