"""llama.cpp backend: the GGUF model served directly on CPU, persona LoRAs converted to GGUF and
switched per call. The default for chat, evaluation and frozen-speaker rollouts on CPU.

`LlamaCppBackend` holds the public API (generate, stream, score, logits, add/remove_adapter, info) and is
composed of one mixin per concept, each in its own module of this package:

- `contexts.py` (`KVContexts`): the model, its weights loaded once, and a context per job, each with its own
  KV cache: the chat context (per-adapter-set cache slots, prefix reuse within one adapter set), the batch
  context (the persona card decoded once and shared by every sequence), the decoder (a second model on the
  decode format that a single reply's keys and values are handed over to) and the scoring context;
- `template.py` (`ChatTemplate`): the GGUF's own chat template, rendered and tokenized;
- `sampling.py` (`TokenLoop`): llama.cpp's sampler chain and the step-by-step decode loop with continuous
  batching (a finished reply hands its slot to the next chat);
- `scoring.py` (`Scoring`): all continuations of one prompt scored in one decode call;
- `runtime.py` (`ThreadCalibration`, `import_llama_cpp`): llama.cpp's OpenMP runtime under its own wait policy,
  and the decode thread count calibrated at load;
- `weights.py`: the GGUF file and the weight format served per job (`weights`, `decode_weights`), chosen by
  `calibrate.py`'s measurements on this machine; `recode.py` re-encodes;
- `lora.py`: PEFT LoRA folders converted to GGUF LoRAs, cached by content hash;
- `prefixes.py` (`PrefixStore`): the keys and values of prompts' system messages kept on disk for the next process.

Nothing here reads the environment: the options come as arguments (`mascot.settings.Settings.backend_options`
fills them from `MASCOT_*` at the entry points). README.md, "Performance", has the measurements.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages
from mascot.backends.llamacpp.contexts import KVContexts, common_prefix
from mascot.backends.llamacpp.lora import BaseShape, convert_lora
from mascot.backends.llamacpp.prefixes import prefix_store
from mascot.backends.llamacpp.recode import recode_gguf
from mascot.backends.llamacpp.runtime import ThreadCalibration, import_llama_cpp
from mascot.backends.llamacpp.sampling import Seq, TokenLoop
from mascot.backends.llamacpp.scoring import Scoring, score_groups
from mascot.backends.llamacpp.template import ChatTemplate
from mascot.backends.llamacpp.weights import (
    DEFAULT_DECODE_WEIGHTS,
    DEFAULT_WEIGHTS,
    choose_formats,
    load_model,
    resolve_gguf,
)
from mascot.errors import BackendError

log = logging.getLogger(__name__)

__all__ = ["LlamaCppBackend", "import_llama_cpp", "resolve_gguf"]


class LlamaCppBackend(ChatTemplate, KVContexts, TokenLoop, Scoring, ThreadCalibration, Backend):
    """llama.cpp on CPU through llama-cpp-python's low-level API.

    `weights` / `decode_weights`: the formats served (weights.py); `threads`: decode threads (None: calibrated at
    load); `omp_wait_policy`: llama.cpp's OpenMP wait policy (runtime.py); `cache_dir`: where re-encoded weights
    and converted LoRAs are kept (None: `mascot.files.model_files.default_cache_dir()`); `keep_prefixes`: keep the
    keys and values of prompts' system messages there too, so a new process skips their prefill (prefixes.py)."""

    kind = "llamacpp"

    def __init__(self, model: str = "embedded", n_ctx: int = 2048, n_seq: int = 8, threads: int | None = None,
                 n_batch: int = 512, weights: str = DEFAULT_WEIGHTS, batch_seqs: int = 16, batch_cells: int = 8192,
                 decode_weights: str = DEFAULT_DECODE_WEIGHTS, omp_wait_policy: str = "",
                 cache_dir: str | Path | None = None, keep_prefixes: bool = False) -> None:
        super().__init__()
        self.ll = import_llama_cpp(omp_wait_policy)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.model_name = model
        self.source = resolve_gguf(model)
        self.cores = len(os.sched_getaffinity(0))
        self.weights, decode_weights, self.formats = choose_formats(
            weights or DEFAULT_WEIGHTS, decode_weights or DEFAULT_DECODE_WEIGHTS, self.source, self.cores, self.cache_dir)
        self.path = recode_gguf(self.source, self.weights, self.cache_dir)
        self.threads = threads or self.cores
        self.n_seq, self.n_ctx_seq, self.n_batch = n_seq, n_ctx, n_batch
        # generate(batch): up to `batch_seqs` sequences at once in one shared pool of `batch_cells` KV cells
        self.batch_seqs, self._batch_cells = batch_seqs, max(batch_cells, n_ctx)
        self._model = load_model(self.ll, self.path, self.source)
        self.meta = self._model.metadata()
        self.shape_error: str | None = None
        try:
            self.shape: BaseShape | None = BaseShape.from_metadata(self.meta, str(self.source))
        except BackendError as exc:
            self.shape, self.shape_error = None, str(exc)
        self.vocab = self._model.vocab
        self.n_vocab = self._model.n_vocab()
        self.template = self.meta.get("tokenizer.chat_template")
        if not self.template:
            raise BackendError(f"{self.source} has no chat template (tokenizer.chat_template); the llamacpp backend "
                               "needs an instruction-tuned GGUF with one.")
        self._chat_context: Any = None  # made on first use (`KVContexts._ctx`)
        self._batch = self.ll.llama_batch_init(n_batch, 0, 1)
        self._decoder: Any = None  # (model, context, its pointer, its memory) for single-reply decoding
        self._dmodel: Any = None  # the decoder's model, kept while any context runs on it
        self._dpath: Path | None = None  # its weights file
        self._on_decoder: set[int] = set()  # addresses of the contexts on the decoder's model (its adapter handles)
        self.decode_weights = self._load_decoder(decode_weights)
        # batches on whichever loaded model the calibration measured faster for them, flash attention as measured
        self.batch_weights = self.decode_weights if (self.formats and self._dmodel is not None
                                                     and self.formats.batch == self.decode_weights) else self.weights
        self._batch_flash_attn: bool | None = self.formats.batch_flash_attn if self.formats else None
        self._lora: dict[str, Any] = {}
        self._dlora: dict[str, Any] = {}  # the same adapters loaded against the decoder's model
        self._gguf_adapters: dict[str, str] = {}
        self._active: dict[int, str | None] = {}  # context address -> adapter set on it ("" = not set yet)
        self._contexts: dict[int, Any] = {}  # context address -> the context (to take an adapter off it)
        # the unified-KV scoring and batch contexts, made on first use, and the prompt prefix each keeps (by adapter)
        self._scorer: Any = None
        self._batcher: Any = None
        self._score_cache: tuple[str | None, list[int]] = (None, [])
        self._parked: dict[str | None, tuple[int, list[int]]] = {}  # adapter -> (batch sequence, prompt prefix kept)
        self._slots: list[tuple[str | None, list[int]]] = [(None, []) for _ in range(n_seq)]
        self._lru: list[int] = list(range(n_seq))
        self._lock = threading.RLock()
        self._env = self._jinja_env()
        self.prefixes = prefix_store(self.cache_dir) if keep_prefixes else None
        self.calibration: dict[int | str, float] = {}  # steps/s by thread count, or why it was not measured
        if threads is None and self.cores > 1:
            self._calibrate_threads()

    def __del__(self) -> None:
        batch = getattr(self, "_batch", None)
        if batch is not None:
            self.ll.llama_batch_free(batch)
            self._batch = None
        for attr in ("_scorer", "_batcher"):
            extra = getattr(self, attr, None)
            if extra is not None:
                self.ll.llama_batch_free(extra[3])
                setattr(self, attr, None)

    # ----------------------------------------------------------------- adapters
    def add_adapter(self, name: str, path: str) -> None:
        """Convert a PEFT LoRA folder to GGUF (once, cached) or take a .gguf LoRA, and load it."""
        src = Path(path)
        if not src.exists():
            raise BackendError(f"Adapter {name!r}: {path} does not exist.")
        if src.suffix != ".gguf":
            if self.shape is None:
                raise BackendError(f"Adapter {name!r}: {self.shape_error}")
            gguf_path = convert_lora(src, self.shape, cache_dir=self.cache_dir)
        else:
            gguf_path = src
        with self._lock:
            handle = self.ll.llama_adapter_lora_init(self._model.model, str(gguf_path).encode())
            dhandle = (self.ll.llama_adapter_lora_init(self._dmodel.model, str(gguf_path).encode())
                       if handle and self._dmodel is not None else None)
        if not handle or (self._dmodel is not None and not dhandle):
            raise BackendError(f"Adapter {name!r}: llama.cpp refused {gguf_path} (a LoRA for another base model or "
                               "architecture, or a corrupt file). Convert it from a PEFT folder trained on this model.")
        self._lora[name] = handle
        if dhandle:
            self._dlora[name] = dhandle
        self._gguf_adapters[name] = str(gguf_path)
        self.adapters[name] = path

    def remove_adapter(self, name: str) -> None:
        """Unload adapter `name`: taken off every context that has it, every cached prompt prefix computed through
        it dropped (a later adapter of the same name must not reuse keys and values of these weights), and its
        llama.cpp handles freed. GRPO rollouts load the policy's new LoRA every step and drop the old one."""
        with self._lock:
            if name not in self._lora:
                raise BackendError(f"Adapter {name!r} is not loaded. Loaded adapters: {', '.join(self._lora) or 'none'}.")
            for key, active in list(self._active.items()):
                if active == name:
                    self.ll.llama_set_adapters_lora(self._contexts[key], None, 0, None)
                    self._active[key] = None
            for i, (key, _) in enumerate(self._slots):
                if key == name:
                    self.ll.llama_memory_seq_rm(self.mem, i, -1, -1)
                    self._slots[i] = (None, [])
            if name in self._parked and self._batcher is not None:
                self.ll.llama_memory_seq_rm(self._batcher[2], self._parked.pop(name)[0], -1, -1)
            if self._score_cache[0] == name:
                self._score_cache = (None, [])
                if self._scorer is not None:
                    self.ll.llama_memory_clear(self._scorer[2], True)
            self.ll.llama_adapter_lora_free(self._lora.pop(name))
            if name in self._dlora:
                self.ll.llama_adapter_lora_free(self._dlora.pop(name))
            self._gguf_adapters.pop(name, None)
            self.adapters.pop(name, None)

    # --------------------------------------------------------------- generation
    def generate(self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None) -> list[Completion]:
        """All chats through one adapter set (Speaker.reply_batch groups by adapter), up to `batch_seqs` at a time
        per decode step on the batch context, with continuous batching: a finished reply's slot takes the next
        chat at once, as far as the KV cells allow."""
        if not batch:
            return []
        if len(batch) == 1:
            text, n_prompt, n_out, finish, tokens = self._single(batch[0], params, adapter, stream=False).__next__()
            return [Completion(text, n_prompt, n_out, finish, tokens)]
        prompts = [self._prompt(m, params) for m in batch]
        return self._generate_tokens(prompts, params, adapter, lambda: self.system_end(batch[0], prompts[0]))

    def generate_prefilled(self, batch: Sequence[tuple[Messages, str]], params: GenerationParams,
                           adapter: str | None = None) -> list[Completion]:
        """Chats with their own prefills in one batched call: the prompts share their common prefix in the KV
        cache and differ only in their tails (best-of-N draws from different reply stems cost one call)."""
        if len(batch) <= 1:
            return [c for m, p in batch for c in self.generate([m], params.with_(prefill=p), adapter)]
        prompts = [self._prompt(m, params.with_(prefill=p)) for m, p in batch]
        return self._generate_tokens(prompts, params, adapter, lambda: self.system_end(batch[0][0], prompts[0]))

    def _generate_tokens(self, prompts: list[list[int]], params: GenerationParams, adapter: str | None,
                         system_end: Callable[[], int] = lambda: 0) -> list[Completion]:
        """`generate` on token prompts: continuous batching on the batch context, the common prefix shared and
        kept for this adapter's next call (`contexts.KVContexts._park`); the first `system_end()` tokens of the
        first prompt (its system message) may be kept on disk for the next process."""
        results: list[Completion | None] = [None] * len(prompts)
        with self._lock:
            _, ctx, mem, lbatch = self._batch_context()
            self._activate(adapter, ctx)
            weights = self._batch_weights_path()
            cached = self._unpark(adapter, mem) or self._restore_prefix(adapter, ctx, mem, prompts[0], weights,
                                                                        self._batch_flash_attn)
            slots = min(self.batch_seqs, len(prompts))
            done = False
            made: list[Seq] = []
            try:
                shared = self._share_prefix(prompts, slots, ctx, mem, lbatch, cached=cached)
                need = [len(p) - shared + params.max_new_tokens for p in prompts]  # KV cells each one may take
                room = self._batch_cells - shared - self._parked_cells()
                while max(need) > room and self._evict_park(mem):
                    room = self._batch_cells - shared - self._parked_cells()
                if max(need) > room:
                    raise BackendError(f"A prompt of {max(len(p) for p in prompts)} tokens plus {params.max_new_tokens} "
                                       f"new ones does not fit the llamacpp batch context ({self._batch_cells} cells); "
                                       "shorten it.")
                pending = list(range(len(prompts)))
                free = list(range(slots))  # the sequences that hold the shared prefix
                index: dict[int, int] = {}  # id(Seq) -> prompt index
                used = 0

                def refill(finished: list[Seq]) -> list[Seq]:
                    nonlocal used
                    for fin in finished:
                        i = index[id(fin)]
                        results[i] = Completion(fin.text, len(fin.prompt), len(fin.out), fin.finish, fin.token_ids())
                        self.ll.llama_memory_seq_rm(mem, fin.seq_id, shared, -1)  # the shared prefix stays
                        free.append(fin.seq_id)
                        used -= need[i]
                    new = []
                    while pending and free and used + need[pending[0]] <= room:
                        i = pending.pop(0)
                        seed = None if params.seed is None else params.seed + i
                        s = Seq(free.pop(0), prompts[i], shared, self._sampler(params, seed, prompts[i]))
                        index[id(s)] = i
                        made.append(s)
                        new.append(s)
                        used += need[i]
                    return new

                for _ in self._run(refill([]), params, refill, ctx, lbatch):
                    pass
                for k in range(1, self.batch_seqs):
                    self.ll.llama_memory_seq_rm(mem, k, -1, -1)
                self.ll.llama_memory_seq_rm(mem, 0, shared, -1)
                self._keep_prefix(adapter, ctx, mem, 1, prompts[0][:shared], system_end, weights, self._batch_flash_attn)
                self._park(adapter, mem, prompts[0][:shared])
                done = True
            finally:
                for s in made:
                    self.ll.llama_sampler_free(s.sampler)
                if not done:
                    self.ll.llama_memory_clear(mem, True)
                    self._parked.clear()
        return [r for r in results if r is not None]

    def _single(self, messages: Messages, params: GenerationParams, adapter: str | None,
                stream: bool) -> Iterator[tuple[str, int, int, str, tuple[int, ...]]]:
        """One chat in a reused cache slot; yields (text so far, prompt tokens, new tokens, finish, token ids)."""
        prompt = self._prompt(messages, params)
        with self._lock:
            self._activate(adapter)
            seq_id, cached = self._slot(adapter, prompt)
            s = Seq(seq_id, prompt, cached, self._sampler(params, params.seed, prompt))
            try:
                # All but the last prompt token on the main weights (fast kernels for many rows), then the last
                # one alone, on the decoder where there is one: the first token's logits then come from the same
                # one-row computation whether the prompt was cached or not (llama.cpp's kernels for one row and
                # for many sum in different orders, enough to flip a near-tie between two greedy tokens).
                self._prefill(prompt, cached, len(prompt) - 1, self.ctx, None, seq_id)
                s.cached = len(prompt) - 1
                dctx = self._hand_over(seq_id) if self._decoder is not None and s.cached else None
                if dctx is not None:
                    self._activate(adapter, dctx)
                    s.seq_id = 0
                steps = self._run([s], params, ctx=dctx)
                while True:
                    if stream:
                        yield s.text, len(prompt), len(s.out), s.finish, ()
                    if next(steps, StopIteration) is StopIteration:
                        break
            finally:
                s.seq_id = seq_id
                self.ll.llama_sampler_free(s.sampler)
                # keep the prompt's keys and values for the next call's prefix reuse (same adapter set only)
                n = min(len(prompt), self.ll.llama_memory_seq_pos_max(self.mem, seq_id) + 1)
                self.ll.llama_memory_seq_rm(self.mem, seq_id, n, -1)
                self._slots[seq_id] = (adapter, prompt[:n])
        yield s.text, len(prompt), len(s.out), s.finish, s.token_ids()

    def stream(self, messages: Messages, params: GenerationParams, adapter: str | None = None) -> Iterator[str]:
        emitted = ""
        for text, *_ in self._single(messages, params, adapter, stream=True):
            if len(text) > len(emitted):
                yield text[len(emitted):]
                emitted = text

    # ------------------------------------------------------------------ scoring
    def score(self, messages: Messages, continuations: Sequence[str], params: GenerationParams,
              adapter: str | None = None) -> list[float]:
        """Sum of each continuation's token log-probabilities after the chat prompt plus `params.prefill`.

        Tokens are those of the whole text (prompt + continuation); where the continuation merges with the
        prompt's last token, the merged token is scored as part of the continuation. The shared prompt is
        decoded once (and reused from the previous call as far as it agrees, under the same adapter); the
        continuations are decoded together, each in its own sequence."""
        if not continuations:
            return []
        text = self.render(messages, params.prefill)
        prompt = self._prompt(messages, params.with_(max_new_tokens=0), text)
        fulls = [self.tokenize(text + c) for c in continuations]
        starts = [max(1, common_prefix(prompt, f)) for f in fulls]
        common = min(starts) - 1  # tokens shared by every continuation, decoded once
        if max(len(f) for f in fulls) - common > self.n_batch or max(len(f) for f in fulls) > self.n_ctx_seq:
            raise BackendError("A continuation to score is longer than the llamacpp batch or context; score shorter texts.")
        scores: list[float] = []
        with self._lock:
            _, ctx, mem, batch = self._scoring_context()
            self._activate(adapter, ctx)
            key, cached = self._score_cache
            reuse = common_prefix(cached, prompt[:common]) if key == adapter else 0
            self.ll.llama_memory_seq_rm(mem, 0, reuse, -1)
            if not reuse:
                reuse = len(self._restore_prefix(adapter, ctx, mem, prompt[:common], self.path, None))
            self._score_cache = (adapter, [])  # until the prompt is in the cache
            groups = score_groups([len(f) - common for f in fulls], self.n_batch, self.SCORE_SEQS)
            # the prompt's uncached tail rides in the first group's decode when it fits, else goes first
            tail = prompt[reuse:common]
            if len(tail) + sum(len(fulls[j]) - common for j in groups[0]) > self.n_batch:
                self._prefill(prompt, reuse, common, ctx, batch)
                tail, reuse = [], common
            for n, group in enumerate(groups):
                scores += self._score_group(ctx, mem, batch, [fulls[j] for j in group], [starts[j] for j in group], common,
                                            tail if n == 0 else [], reuse)
                self._score_cache = (adapter, prompt[:common])
            self._keep_prefix(adapter, ctx, mem, self.SCORE_SEQS - 1, prompt[:common],
                              lambda: self.system_end(messages, prompt), self.path, None)
        return scores

    def logits(self, messages: Messages, params: GenerationParams, adapter: str | None = None) -> np.ndarray:
        """Next-token logits at every prompt position (float32, [n_tokens, n_vocab]); for correctness tests."""
        prompt = self._prompt(messages, params.with_(max_new_tokens=0))
        if len(prompt) > self.n_batch:
            raise BackendError(f"logits() handles prompts up to {self.n_batch} tokens; this one has {len(prompt)}.")
        with self._lock:
            self._activate(adapter)
            self._forget_slots()
            self._decode([(t, p, 0, True) for p, t in enumerate(prompt)])
            out = np.stack([self._logits(i).copy() for i in range(len(prompt))])
            self._forget_slots()
        return out

    def info(self) -> BackendInfo:
        weights = self.weights if self.decode_weights == self.weights else f"{self.weights}, decoding {self.decode_weights}"
        if self.batch_weights != self.weights:
            weights += f", batches on {self.batch_weights}"
        return BackendInfo("llamacpp", f"{self.model_name} ({self.source.name}, weights {weights})", f"cpu ×{self.threads}",
                           # llama.cpp's description without a size it only guessed ("llama 256M (guessed) Q8_0" for 135M)
                           re.sub(r"\s*[\d.]+[KMBT]?\s*\(guessed\)", "", self._model.desc()),
                           dict(self.adapters))
