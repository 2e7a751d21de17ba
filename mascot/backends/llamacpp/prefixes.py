"""Keys and values of the fixed openings of prompts, kept on disk so that a new process skips their prefill.

Every speaker prompt opens with its persona card and every director prompt with the roster and its instructions:
a few hundred tokens that a process computes again at each start (about 0.25 s per persona on 2 cores), before
the first answer of a one-shot CLI call or of a freshly started app. The store keeps, per adapter, the keys and
values of a prompt's **system message** only (never the dialogue: the user's words do not reach the disk) and
puts them back into an empty sequence of a unified-KV context on the next process's first call.

A file is valid only for the llama.cpp build, the model file, the KV layout (flash attention transposes V) and
the adapter file it was computed with: all of them are in its key. A file that llama.cpp refuses or that is
damaged is deleted and the prefix is prefilled as before, with a warning. At most `MAX_FILES` files are kept, over
all builds (the least recently used go first: training loads a new adapter every step).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mascot.backends.llamacpp.contexts import common_prefix
from mascot.backends.llamacpp.probe import file_id

log = logging.getLogger(__name__)

VERSION = 1
MIN_TOKENS = 32  # shorter prefixes cost less to prefill than to read back
MAX_FILES = 24
_MAGIC = b"MASCOTKV"


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:24]


class PrefixStore:
    """A folder of prompt-opening KV states for one llama.cpp build (`identity`); weights and adapters are in each key."""

    def __init__(self, root: str | Path, identity: Sequence[object]) -> None:
        self.root = Path(root) / _digest(VERSION, *identity)
        self._missing: set[str] = set()  # keys looked up without a file this process (not read again)
        self._unwritable: set[str] = set()  # keys whose file could not be written this process
        self._scratch = (ctypes.c_uint8 * 0)()

    def key(self, weights_file: str | Path, adapter_file: str | None, flash_attn: bool | None) -> str:
        """The file key of a context's prefixes: the weights it runs on, its adapter's GGUF file (or none) and
        its flash-attention setting."""
        return _digest(file_id(weights_file), file_id(adapter_file) if adapter_file else "base", flash_attn)

    def wants(self, key: str) -> bool:
        """Whether `save` would write `key`: no file yet, and none failed to write in this process."""
        return key not in self._unwritable and not (self.root / f"{key}.kv").exists()

    def restore(self, ll: Any, ctx: Any, mem: Any, seq: int, key: str, tokens: Sequence[int]) -> int:
        """Load the stored prefix for `key` into the empty sequence `seq` and keep only the part `tokens` starts
        with; returns how many tokens of `tokens` are now cached there (0: nothing usable)."""
        if key in self._missing:
            return 0
        path = self.root / f"{key}.kv"
        try:
            raw = path.read_bytes()
        except OSError:
            self._missing.add(key)
            return 0
        stored, blob = self._parse(raw)
        n = common_prefix(stored or [], tokens)
        if stored is None or n < MIN_TOKENS:
            if stored is None:
                self._drop(path, "damaged")
            return 0
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        if ll.llama_state_seq_set_data(ctx, buf, len(blob), seq) != len(blob):
            ll.llama_memory_seq_rm(mem, seq, -1, -1)
            self._drop(path, "refused by llama.cpp")
            return 0
        ll.llama_memory_seq_rm(mem, seq, n, -1)
        try:
            os.utime(path)  # recently used: kept longest
        except OSError:  # a read-only cache still serves
            pass
        return n

    def save(self, ll: Any, ctx: Any, mem: Any, seq: int, scratch_seq: int, key: str, tokens: Sequence[int]) -> None:
        """Write the first `len(tokens)` cells of `seq` (holding `tokens` from position 0) under `key`, unless a
        file is there already; `scratch_seq` is an empty sequence used to cut the state to that prefix."""
        path = self.root / f"{key}.kv"
        if len(tokens) < MIN_TOKENS or not self.wants(key):
            return
        if ll.llama_memory_seq_pos_max(mem, seq) + 1 < len(tokens):
            return  # the sequence does not hold them all
        ll.llama_memory_seq_rm(mem, scratch_seq, -1, -1)
        ll.llama_memory_seq_cp(mem, seq, scratch_seq, 0, len(tokens))
        try:
            size = ll.llama_state_seq_get_size(ctx, scratch_seq)
            if len(self._scratch) < size:
                self._scratch = (ctypes.c_uint8 * size)()
            n = ll.llama_state_seq_get_data(ctx, self._scratch, size, scratch_seq)
            blob = bytes(memoryview(self._scratch)[:n])
        finally:
            ll.llama_memory_seq_rm(mem, scratch_seq, -1, -1)
        if not n:
            return
        head = json.dumps(list(tokens)).encode()
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".kv-")
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + len(head).to_bytes(4, "little") + head + blob)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk only costs the next start its prefill
            log.warning("could not keep a prompt prefix in %s (%s)", self.root, exc)
            self._unwritable.add(key)  # not tried again by this process
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)  # a half-written file never stays
            return
        self._missing.discard(key)
        self._prune()

    @staticmethod
    def _parse(raw: bytes) -> tuple[list[int] | None, bytes]:
        if not raw.startswith(_MAGIC) or len(raw) < len(_MAGIC) + 4:
            return None, b""
        size = int.from_bytes(raw[len(_MAGIC):len(_MAGIC) + 4], "little")
        start = len(_MAGIC) + 4
        try:
            tokens = json.loads(raw[start:start + size])
        except ValueError:
            return None, b""
        blob = raw[start + size:]
        if not isinstance(tokens, list) or not blob:
            return None, b""
        return tokens, blob

    def _drop(self, path: Path, why: str) -> None:
        log.warning("prompt prefix %s was %s; prefilling instead", path, why)
        self._missing.add(path.stem)
        try:
            path.unlink(missing_ok=True)
        except OSError:  # a read-only cache: the file stays, and this process no longer reads it
            pass

    def _prune(self) -> None:
        """Keep the `MAX_FILES` most recently used files of every build's folder together (an old build's go first)."""
        def used(path: Path) -> int:
            try:
                return path.stat().st_mtime_ns
            except OSError:  # removed meanwhile by another process
                return 0

        files = sorted(self.root.parent.glob("*/*.kv"), key=used)
        for old in files[:max(0, len(files) - MAX_FILES)]:
            try:
                old.unlink(missing_ok=True)
                if old.parent != self.root and not any(old.parent.iterdir()):
                    old.parent.rmdir()
            except OSError:  # another process pruning at the same time
                continue


def prefix_store(cache_dir: str | Path | None) -> PrefixStore:
    """The store under `cache_dir` (None: the default model cache) for the installed llama.cpp build."""
    from mascot.backends.llamacpp.probe import _key, _library
    from mascot.files.model_files import default_cache_dir

    lib = _library()
    return PrefixStore(Path(cache_dir or default_cache_dir()) / "llamacpp-prefixes", [_key(lib) if lib else "no-library"])
