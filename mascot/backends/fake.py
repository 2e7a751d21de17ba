"""A scripted backend for tests and UI demos: replies come from a queue or a responder function."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages, cut_at_stop

Responder = Callable[[Messages, GenerationParams, "str | None"], str]
# (chat, continuations, params, adapter) -> one log-probability per continuation
Scorer = Callable[[Messages, Sequence[str], GenerationParams, "str | None"], list[float]]


def first_choice_scorer(messages: Messages, continuations: Sequence[str], params: GenerationParams,
                        adapter: str | None) -> list[float]:
    """Default scores: the first continuation is the most likely, then the second, and so on."""
    return [-1.0 - i for i in range(len(continuations))]


@dataclass
class FakeCall:
    """One recorded call: the chat, the params and the adapter it used."""

    messages: Messages
    params: GenerationParams
    adapter: str | None


def echo_responder(messages: Messages, params: GenerationParams, adapter: str | None) -> str:
    """Default reply: a short sentence naming the adapter and echoing the last user line."""
    last = messages[-1]["content"].strip().splitlines()[-1] if messages else ""
    if params.prefill.startswith("{"):
        return "none\"}"  # a director call: yields the floor unless the test enqueues otherwise
    who = adapter or "base"
    return f"[{who}] I hear you about: {last[:60]}"


class FakeBackend(Backend):
    """Returns enqueued texts in order, then falls back to `responder`; records every call."""

    kind = "fake"

    def __init__(self, responder: Responder | None = None, chunk_size: int = 4, scorer: Scorer | None = None) -> None:
        super().__init__()
        self.scorer: Scorer = scorer or first_choice_scorer
        self.score_calls: list[tuple[FakeCall, list[str]]] = []
        self.queue: deque[str] = deque()
        self.responder: Responder = responder or echo_responder
        self.calls: list[FakeCall] = []
        self.chunk_size = chunk_size

    def enqueue(self, *texts: str) -> FakeBackend:
        """Queue replies returned (in order) by the next generate/stream calls."""
        self.queue.extend(texts)
        return self

    def _one(self, messages: Messages, params: GenerationParams, adapter: str | None) -> str:
        self.calls.append(FakeCall(messages, params, adapter))
        raw = self.queue.popleft() if self.queue else self.responder(messages, params, adapter)
        return cut_at_stop(raw, params.stop)[0]

    def generate(
        self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None
    ) -> list[Completion]:
        out = []
        for m in batch:
            text = self._one(m, params, adapter)
            out.append(Completion(text, prompt_tokens=sum(len(x["content"]) for x in m) // 4,
                                  completion_tokens=max(1, len(text) // 4)))
        return out

    def stream(self, messages: Messages, params: GenerationParams, adapter: str | None = None) -> Iterator[str]:
        text = self._one(messages, params, adapter)
        for i in range(0, len(text), self.chunk_size):
            yield text[i : i + self.chunk_size]

    def score(self, messages: Messages, continuations: Sequence[str], params: GenerationParams,
              adapter: str | None = None) -> list[float]:
        self.score_calls.append((FakeCall(messages, params, adapter), list(continuations)))
        return [float(x) for x in self.scorer(messages, continuations, params, adapter)]

    def add_adapter(self, name: str, path: str) -> None:
        self.adapters[name] = path

    def info(self) -> BackendInfo:
        return BackendInfo(kind="fake", model="scripted", adapters=dict(self.adapters))
