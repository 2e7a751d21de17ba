"""The llamacpp backend's token loop: llama.cpp's sampler chain, and decoding many sequences step by step.

Sampling is llama.cpp's sampler chain, in transformers' order: repetition penalty over prompt + output,
top_k (transformers' default 50), temperature, top_p, then a seeded draw (greedy when temperature <= 0).
`_run` prefills every sequence's prompt tail and decodes all live sequences together, one token each per
decode call; with `refill`, a finished sequence hands its slot to the next one (continuous batching).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mascot.backends.base import GenerationParams, cut_at_stop


@dataclass
class Seq:
    """One sequence being generated: its KV sequence id, tokens and sampler."""

    seq_id: int
    prompt: list[int]
    cached: int  # prompt tokens already in the KV cache for this sequence
    sampler: Any
    out: list[int] = field(default_factory=list)
    raw: bytes = b""
    text: str = ""
    done: bool = False
    finish: str = "length"
    eog: int | None = None  # the end-of-generation token that stopped it, if one did

    def token_ids(self) -> tuple[int, ...]:
        """The sampled tokens, the stopping end-of-generation token included."""
        return (*self.out, self.eog) if self.eog is not None else tuple(self.out)


class TokenLoop:
    """`LlamaCppBackend`'s sampling and decode loop (uses its `ll`, `_model`, `vocab`, `n_vocab`, `n_batch`,
    `ctx` and `_decode`)."""

    def _sampler(self, params: GenerationParams, seed: int | None, history: list[int]) -> Any:
        """A sampler chain for one sequence, seeded, its penalties primed with the prompt `history`."""
        ll = self.ll
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if params.repetition_penalty != 1.0:  # transformers-style: every token of prompt and output counts
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_penalties(
                self.n_vocab, len(history) + params.max_new_tokens, params.repetition_penalty, 0.0, 0.0))
        if params.temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:  # as transformers: top-k, then temperature and top-p (cheap after top-k)
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(params.top_k))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(params.temperature))
            if params.top_p < 1.0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(
                ll.LLAMA_DEFAULT_SEED if seed is None else seed & 0xFFFFFFFF))
        if params.repetition_penalty != 1.0:
            for t in history:
                ll.llama_sampler_accept(chain, t)
        return chain

    def _take(self, s: Seq, tok: int, params: GenerationParams) -> None:
        """Record one sampled token (llama_sampler_sample already fed it to the penalties), update text and stop state."""
        if self.ll.llama_vocab_is_eog(self.vocab, tok):
            s.done, s.finish, s.eog = True, "stop", tok
            return
        s.out.append(tok)
        s.raw += self._model.token_to_piece(tok).rstrip(b"\0")
        text, hit = cut_at_stop(s.raw.decode("utf-8", errors="ignore"), params.stop)
        s.text = text
        if hit:
            s.done, s.finish = True, "stop"
        elif len(s.out) >= params.max_new_tokens:
            s.done, s.finish = True, "length"

    def _run(self, seqs: list[Seq], params: GenerationParams,
             refill: Callable[[list[Seq]], list[Seq]] | None = None, ctx: Any = None, batch: Any = None) -> Iterator[None]:
        """Prefill every sequence's uncached prompt tail, then decode all live ones step by step.

        With `refill`, finished sequences hand their slots to the sequences `refill` returns (called every step
        with the ones that just finished), whose prompts are prefilled within the next decode step (continuous
        batching: the batch stays full instead of waiting for its longest reply). Yields after each decode
        step (so streaming can forward text or stop early)."""
        ctx = ctx or self.ctx
        entries: list[tuple[int, int, int, bool]] = []
        owners: list[Seq | None] = []

        def flush() -> None:
            self._decode(entries, ctx, batch)
            for j, s in enumerate(owners):
                if s is not None:
                    self._take(s, self.ll.llama_sampler_sample(s.sampler, ctx, j), params)
            entries.clear()
            owners.clear()

        def add_prompt(s: Seq) -> None:
            for pos in range(s.cached, len(s.prompt)):
                if len(entries) == self.n_batch:
                    flush()
                last = pos == len(s.prompt) - 1
                entries.append((s.prompt[pos], pos, s.seq_id, last))
                owners.append(s if last else None)

        for s in seqs:
            add_prompt(s)
        if entries:
            flush()
        yield
        live = list(seqs)
        while True:
            if refill is not None:
                finished = [s for s in live if s.done]
                live = [s for s in live if not s.done]
                for new in refill(finished):
                    live.append(new)
                    add_prompt(new)
            stepping = [s for s in live if not s.done and s.out]
            if not entries and not stepping and all(s.done for s in live):
                return
            for s in stepping:
                if len(entries) == self.n_batch:
                    flush()
                entries.append((s.out[-1], len(s.prompt) + len(s.out) - 1, s.seq_id, True))
                owners.append(s)
            if entries:
                flush()
            yield

