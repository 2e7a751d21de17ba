"""The llamacpp backend's llama.cpp contexts and what lives in their KV caches.

The main model (its weights loaded once) has three contexts, and the decoder model one, each with its own KV cache:

- chat (`ctx`, `mem`): `n_seq` KV sequences in separate streams. A single call keeps a per-adapter-set cache
  slot and reuses the longest common token prefix **only within the same adapter set**: a slot is keyed by
  (adapter set, tokens), so changing the adapter set never decodes on another persona's keys and values
  (llama-cpp-python's own prefix cache keys by tokens alone);
- batch (`generate` of several chats): one unified pool of KV cells; the chats' shared prefix (the persona
  card) is decoded once in sequence 0 and tagged to every other sequence (`_share_prefix`);
- decoder (`decode_weights`, see weights.py): a second model with one stream. A single reply's prompt is
  decoded on the main weights and its keys and values handed over to this one (`_hand_over`, a byte-level
  rewrite of llama.cpp's sequence state), which decodes one token at a time faster;
- scoring (`score`): unified too, made on first use (scoring.py).

Adapters are set per context (`_activate`), so switching one context's adapter never touches another's cache.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mascot.backends.llamacpp.recode import recode_gguf
from mascot.backends.llamacpp.weights import check_decode_weights, load_model
from mascot.errors import BackendError

log = logging.getLogger(__name__)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class KVContexts:
    """`LlamaCppBackend`'s contexts, their KV slots and prefixes, and token decoding on them.

    Uses the backend's `ll`, `_model`, `source`, `path`, `weights`, `threads`, `n_seq`, `n_ctx_seq`, `n_batch`,
    `n_vocab`, `cache_dir` and the state `__init__` sets up (`ctx`, `mem`, `_batch`, `_slots`, `_lru`, ...)."""

    # ---------------------------------------------------------------- contexts
    @property
    def _ctx(self) -> Any:
        """The chat context (a cache slot per sequence for single replies), made on first use: careful replies
        draw in the batch context and the director scores in its own, so a one-shot careful answer never
        allocates its `n_ctx * n_seq` KV cells (about 0.2 s and 380 MB at the defaults)."""
        if self._chat_context is None:
            self._chat_context = self._context(self._model, self.n_ctx_seq * self.n_seq, self.n_seq, unified=False)
        return self._chat_context

    @property
    def ctx(self) -> Any:
        return self._ctx.ctx

    @property
    def mem(self) -> Any:
        return self._ctx.memory

    def _context(self, model: Any, cells: int, seqs: int, unified: bool, flash_attn: bool | None = None) -> Any:
        """A llama.cpp context on `model` with `cells` KV cells for up to `seqs` sequences (one pool, or one
        stream per sequence), n_batch tokens per decode call and this backend's threads; flash attention on,
        off, or (None) as llama.cpp decides."""
        from llama_cpp import _internals

        cparams = self.ll.llama_context_default_params()
        if flash_attn is not None:
            cparams.flash_attn_type = (self.ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                       else self.ll.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cparams.n_ctx = cells
        cparams.n_batch = cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = seqs
        cparams.kv_unified = unified
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.no_perf = True
        return _internals.LlamaContext(model=model, params=cparams, verbose=False)

    def _unified_context(self, cells: int, seqs: int, seqs_per_token: int, model: Any = None,
                         flash_attn: bool | None = None) -> tuple[Any, Any, Any, Any]:
        """(context, its pointer, its memory, a token batch) with one KV pool shared by `seqs` sequences, on the
        main model or `model`."""
        ctx = self._context(model or self._model, cells, seqs, unified=True, flash_attn=flash_attn)
        if model is not None and model is self._dmodel:
            self._on_decoder.add(int(ctx.ctx))
        return ctx, ctx.ctx, ctx.memory, self.ll.llama_batch_init(self.n_batch, 0, seqs_per_token)

    def _batch_context(self) -> Any:
        """A context for `generate(batch)`, on the same weights: one unified KV buffer that every sequence of a
        call shares (the persona prefix is decoded once and tagged to each sequence, not copied), cleared per
        call. Decoding eight sequences together took 31-34 ms a step here, against 54 ms in the per-sequence
        streams of the chat's context (benchmarks/llamacpp_speed.py reports the throughput). It runs on the model
        and with the flash-attention setting the format calibration measured fastest for batches."""
        if self._batcher is None:
            model = self._dmodel if self.batch_weights != self.weights else None  # only set when a decoder is loaded
            self._batcher = self._unified_context(self._batch_cells, self.batch_seqs + self.PARKS, 1, model,
                                                  self._batch_flash_attn)
        return self._batcher

    # Each adapter's last prompt prefix stays in the batch context, in a sequence of its own past the generating
    # ones (a tag on its KV cells, nothing copied): the speakers of a careful turn take turns, and each would
    # otherwise prefill its whole persona card and dialogue again (0.45 s of a 3-speaker best-of-4 turn each).
    PARKS = 8

    def _unpark(self, adapter: str | None, mem: Any) -> list[int]:
        """Move `adapter`'s kept prefix into sequence 0 (emptied first); returns its tokens ([] if none)."""
        self.ll.llama_memory_seq_rm(mem, 0, -1, -1)
        entry = self._parked.pop(adapter, None)
        if entry is None:
            return []
        seq, tokens = entry
        self.ll.llama_memory_seq_cp(mem, seq, 0, -1, -1)
        self.ll.llama_memory_seq_rm(mem, seq, -1, -1)
        return tokens

    def _park(self, adapter: str | None, mem: Any, tokens: list[int]) -> None:
        """Keep sequence 0 (holding `tokens`) for `adapter`'s next call, evicting the least recently used."""
        if tokens:
            if len(self._parked) == self.PARKS:
                self._evict_park(mem)
            taken = {seq for seq, _ in self._parked.values()}
            free = [s for s in range(self.batch_seqs, self.batch_seqs + self.PARKS) if s not in taken]
            self.ll.llama_memory_seq_cp(mem, 0, free[0], -1, -1)
            self._parked[adapter] = (free[0], tokens)
        self.ll.llama_memory_seq_rm(mem, 0, -1, -1)

    def _evict_park(self, mem: Any) -> bool:
        """Drop the least recently used kept prefix; False when none is left."""
        if not self._parked:
            return False
        seq, _ = self._parked.pop(next(iter(self._parked)))
        self.ll.llama_memory_seq_rm(mem, seq, -1, -1)
        return True

    def _parked_cells(self) -> int:
        return sum(len(tokens) for _, tokens in self._parked.values())

    # ------------------------------------------------ prompt openings kept on disk
    def _batch_weights_path(self) -> Any:
        """The weights file the batch context runs on."""
        return self._dpath if self.batch_weights != self.weights else self.path

    def _prefix_key(self, adapter: str | None, weights_path: Any, flash_attn: bool | None) -> str:
        return self.prefixes.key(weights_path, self._gguf_adapters.get(adapter) if adapter else None, flash_attn)

    def _restore_prefix(self, adapter: str | None, ctx: Any, mem: Any, tokens: list[int], weights_path: Any,
                        flash_attn: bool | None) -> list[int]:
        """Into the empty sequence 0: the stored keys and values of the opening `tokens` start with (prefixes.py);
        returns the tokens now cached there ([] without a store or a usable file)."""
        if self.prefixes is None or not tokens:
            return []
        n = self.prefixes.restore(self.ll, ctx, mem, 0, self._prefix_key(adapter, weights_path, flash_attn), tokens)
        return tokens[:n]

    def _keep_prefix(self, adapter: str | None, ctx: Any, mem: Any, scratch: int, tokens: list[int],
                     system_end: Callable[[], int], weights_path: Any, flash_attn: bool | None) -> None:
        """Store sequence 0's opening, at most up to the end of the system message (`system_end()`, computed only
        when the store wants the file), for the next process; `tokens`: what sequence 0 holds."""
        if self.prefixes is None:
            return
        key = self._prefix_key(adapter, weights_path, flash_attn)
        if self.prefixes.wants(key):
            self.prefixes.save(self.ll, ctx, mem, 0, scratch, key, tokens[:system_end()])

    # ------------------------------------------------------------- the decoder
    def _load_decoder(self, decode_weights: str) -> str:
        """Load the second model and its one-sequence context that single replies decode on (`decode_weights`,
        see weights.py); returns the weights single replies decode on."""
        if decode_weights == "same":
            return self.weights
        check_decode_weights(decode_weights)
        path = recode_gguf(self.source, decode_weights, self.cache_dir)
        if path == self.path:
            return self.weights
        model = load_model(self.ll, path, self.source)
        ctx = self._context(model, self.n_ctx_seq, 1, unified=False)
        self._decoder = (model, ctx, ctx.ctx, ctx.memory)
        self._dmodel, self._dpath = model, path
        self._on_decoder.add(int(ctx.ctx))
        self._state = (ctypes.c_uint8 * 0)()
        return decode_weights

    def _hand_over(self, seq_id: int) -> Any | None:
        """Copy sequence `seq_id`'s keys and values (the prompt, decoded on the main weights) into the decoder's
        sequence 0; returns the decoder's context, or None (and stops using the decoder) if llama.cpp refuses.

        Both models share one architecture, so the cells match, but llama.cpp writes a sequence's state with
        the writer's stream count (`n_seq` streams here, only one of them filled) and refuses it in a context
        with another count. Keeping `n_seq` streams in the decoder would cost about 360 MB of cleared KV
        cells, so the state is rewritten to one stream: `magic, seq_id, n_stream`, then one cell count per
        stream (0 for the empty ones) with the filled stream's cells after its count (checked here)."""
        _, _, dctx, dmem = self._decoder
        size = self.ll.llama_state_seq_get_size(self.ctx, seq_id)
        if len(self._state) < size:
            self._state = (ctypes.c_uint8 * size)()
        n = self.ll.llama_state_seq_get_data(self.ctx, self._state, size, seq_id)
        raw = memoryview(self._state)[:n]
        head = np.frombuffer(raw[:12 + 4 * self.n_seq], dtype="<u4") if n >= 12 + 4 * self.n_seq else np.zeros(0)
        tail = np.frombuffer(raw[n - 4 * (self.n_seq - 1 - seq_id):], dtype="<u4") if n else np.zeros(0)
        ok = (len(head) and head[1] == seq_id and head[2] == self.n_seq and not head[3:3 + seq_id].any()
              and head[3 + seq_id] > 0 and not tail.any())
        if ok:
            blob = bytes(raw[:4]) + np.array([0, 1], dtype="<u4").tobytes() + bytes(raw[12 + 4 * seq_id:n - len(tail) * 4])
            buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
            self.ll.llama_memory_seq_rm(dmem, 0, -1, -1)
            ok = self.ll.llama_state_seq_set_data(dctx, buf, len(blob), 0) == len(blob)
        if not ok:
            log.warning("llama.cpp's sequence state has a layout this backend does not know (llama-cpp-python %s); "
                        "single replies now decode on the %s weights.", getattr(self.ll, "__version__", "?"), self.weights)
            self._decoder, self.decode_weights = None, self.weights
            return None
        return dctx

    # ------------------------------------------------------------- adapters
    def _activate(self, adapter: str | None, ctx: Any = None) -> None:
        """Put exactly `adapter` (or none) on a context (the generation one by default); KV entries are keyed
        by adapter set, so no reuse leaks across."""
        ctx = ctx or self.ctx
        if adapter is not None and adapter not in self._lora:
            raise BackendError(f"Adapter {adapter!r} is not loaded. Loaded adapters: {', '.join(self._lora) or 'none'}.")
        key = int(ctx)
        if self._active.get(key, "") == adapter:
            return
        if adapter is None:
            rc = self.ll.llama_set_adapters_lora(ctx, None, 0, None)
        else:
            handles = self._dlora if key in self._on_decoder else self._lora
            arr = (self.ll.llama_adapter_lora_p_ctypes * 1)(handles[adapter])
            rc = self.ll.llama_set_adapters_lora(ctx, arr, 1, (ctypes.c_float * 1)(1.0))
        if rc != 0:
            raise BackendError(f"llama.cpp could not switch to adapter {adapter!r} (code {rc}).")
        self._active[key] = adapter
        self._contexts[key] = ctx

    # ----------------------------------------------------------------- decoding
    def _decode(self, entries: list[tuple[int, int, int, bool]], ctx: Any = None, batch: Any = None) -> None:
        """Decode (token, pos, seq_id, want_logits) entries, n_batch at a time (callers keep chunks <= n_batch)."""
        b = batch or self._batch
        b.n_tokens = len(entries)
        for j, (tok, pos, seq, logits) in enumerate(entries):
            b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = tok, pos, 1, logits
            b.seq_id[j][0] = seq
        rc = self.ll.llama_decode(ctx or self.ctx, b)
        if rc != 0:
            raise BackendError(f"llama.cpp decode failed (code {rc}): the KV cache is full or the input is invalid.")

    def _logits(self, i: int, ctx: Any = None) -> np.ndarray:
        ptr = self.ll.llama_get_logits_ith(ctx or self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _prefill(self, tokens: list[int], start: int, end: int, ctx: Any, batch: Any, seq_id: int = 0) -> None:
        """Decode tokens[start:end] into sequence `seq_id`, without logits, n_batch at a time."""
        for pos in range(start, end, self.n_batch):
            self._decode([(tokens[p], p, seq_id, False) for p in range(pos, min(end, pos + self.n_batch))], ctx, batch)

    # ----------------------------------------------------------- KV slots and prefixes
    def _slot(self, adapter: str | None, tokens: list[int]) -> tuple[int, int]:
        """Pick the cache slot for a single call: the same adapter set with the longest common prefix, else
        the least recently used one. Returns (seq_id, reusable tokens) and trims the slot to that prefix."""
        best, best_n = -1, -1
        for i, (key, cached) in enumerate(self._slots):
            if key != adapter or not cached:
                continue
            n = common_prefix(cached, tokens)
            if n > best_n:
                best, best_n = i, n
        if best < 0:
            best, best_n = self._lru[0], 0
        best_n = min(best_n, len(tokens) - 1)  # always decode at least the last prompt token
        self.ll.llama_memory_seq_rm(self.mem, best, best_n, -1)
        self._slots[best] = (adapter, tokens[:best_n])
        self._lru.remove(best)
        self._lru.append(best)
        return best, best_n

    def _forget_slots(self) -> None:
        self.ll.llama_memory_clear(self.mem, True)
        self._slots = [(None, []) for _ in range(self.n_seq)]

    def _share_prefix(self, prompts: list[list[int]], slots: int, ctx: Any = None, mem: Any = None, batch: Any = None,
                      min_tokens: int = 32, cached: list[int] | None = None) -> int:
        """Prefill the prompts' common prefix (the persona card, for one adapter group) once in sequence 0 and
        copy it to sequences 1..slots-1; returns how many tokens every sequence now has cached. Sequence 0 may
        already hold `cached` tokens (the previous call's prefix, same adapter); every other one is empty."""
        n = min([len(p) - 1 for p in prompts] + [common_prefix(prompts[0], p) for p in prompts[1:]])
        if len(prompts) < 2 or n < min_tokens:
            self.ll.llama_memory_seq_rm(mem or self.mem, 0, -1, -1)
            return 0
        start = common_prefix(cached or [], prompts[0][:n])
        self.ll.llama_memory_seq_rm(mem or self.mem, 0, start, -1)
        self._prefill(prompts[0], start, n, ctx, batch)
        for i in range(1, slots):
            self.ll.llama_memory_seq_cp(mem or self.mem, 0, i, -1, -1)
        return n

