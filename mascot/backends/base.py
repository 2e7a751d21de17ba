"""The one generation interface shared by the live chat, training rollouts and evaluation.

A backend turns chat-format messages into text, optionally through a named LoRA adapter on one
shared base model. Implementations: llamacpp (the CPU default: the GGUF model with GGUF LoRAs),
transformers (CPU/GPU, and what training uses), vllm (GPU, multi-LoRA), openai (any
OpenAI-compatible server) and fake (scripted, for tests). `auto` picks llamacpp on CPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# A chat in the OpenAI/HF format: [{"role": "system"|"user"|"assistant", "content": "..."}].
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings for one call. `prefill` starts the assistant message (e.g. `{"speaker": "`)
    and is not repeated in the returned text."""

    max_new_tokens: int = 96
    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 50  # transformers' sampling default, stated so every backend samples alike (0 = off)
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    prefill: str = ""

    def with_(self, **changes: Any) -> GenerationParams:
        return replace(self, **changes)


@dataclass
class Completion:
    """One generated continuation and its token counts."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    # the sampled token ids, ending with the end-of-turn token when the model stopped itself; filled by backends
    # that sample locally (llamacpp) for training rollouts that need them (GRPO), else empty
    token_ids: tuple[int, ...] = ()


@dataclass
class BackendInfo:
    """What the UI and run cards show about a loaded backend."""

    kind: str
    model: str
    device: str = "cpu"
    dtype: str = ""
    adapters: dict[str, str] = field(default_factory=dict)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut `text` at the first stop string; returns (text, whether a stop was hit)."""
    cut = len(text)
    for s in stop:
        i = text.find(s) if s else -1
        if 0 <= i < cut:
            cut = i
    return text[:cut], cut < len(text)


class Backend(ABC):
    """Generate text for batches of chats, optionally through a named LoRA adapter.

    `adapter=None` always means the plain base model. Adapters are registered once with
    `add_adapter(name, path)` and then switched per call, on one loaded base model.
    """

    kind: str = "base"

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}

    @abstractmethod
    def generate(
        self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None
    ) -> list[Completion]:
        """Generate one completion per chat in `batch` (batched where the backend can)."""

    def generate_prefilled(
        self, batch: Sequence[tuple[Messages, str]], params: GenerationParams, adapter: str | None = None
    ) -> list[Completion]:
        """One completion per (chat, prefill): like `generate`, but each chat starts its assistant message from its
        own prefill (best-of-N draws from different reply stems). The default makes one `generate` call per
        distinct prefill (each with `params.seed`, as separate calls would); backends that batch prompts with
        different tails override it with one call."""
        out: list[Completion | None] = [None] * len(batch)
        groups: dict[str, list[int]] = {}
        for i, (_, prefill) in enumerate(batch):
            groups.setdefault(prefill, []).append(i)
        for prefill, idx in groups.items():
            for i, c in zip(idx, self.generate([batch[i][0] for i in idx], params.with_(prefill=prefill), adapter)):
                out[i] = c
        return [c for c in out if c is not None]

    def stream(
        self, messages: Messages, params: GenerationParams, adapter: str | None = None
    ) -> Iterator[str]:
        """Yield text deltas for one chat; the default yields the whole completion at once."""
        yield self.generate([messages], params, adapter)[0].text

    def add_adapter(self, name: str, path: str) -> None:
        """Register a LoRA adapter under `name`; raise BackendError if it cannot be used."""
        from mascot.errors import BackendError

        raise BackendError(f"The {self.kind} backend does not support LoRA adapters (asked for {name!r} at {path}).")

    def remove_adapter(self, name: str) -> None:
        """Unregister adapter `name` (backends holding its weights free them too)."""
        self.adapters.pop(name, None)

    def score(
        self, messages: Messages, continuations: Sequence[str], params: GenerationParams, adapter: str | None = None
    ) -> list[float]:
        """For each continuation, the sum of its token log-probabilities after the chat prompt plus
        `params.prefill` (the director uses it to pick a speaker constrained to the roster). Backends that
        cannot score raise BackendError; the director then falls back to generate-and-validate."""
        from mascot.errors import BackendError

        raise BackendError(f"The {self.kind} backend cannot score continuations; use --backend llamacpp or transformers.")

    @abstractmethod
    def info(self) -> BackendInfo:
        """Describe the loaded model for the UI and run cards."""

    def count_tokens(self, text: str) -> int:
        """Approximate token count (backends with a tokenizer override this)."""
        return max(1, len(text) // 4)
