"""Does the installed llama.cpp build run on this CPU? Checked once in a child process, remembered per build.

A llama.cpp compiled with `-march=native` on a machine whose CPU reports AMX (or on another CPU) can
fault on its first decode: a segfault kills the whole process, so it cannot be caught in-process. `auto`
asks `llamacpp_runs()` before it picks llama.cpp; a build that crashed falls back to transformers with one
warning that says how to rebuild (`make llama-rebuild`, scripts/llama_cmake_args.py). The verdict is
cached in the model cache, keyed by the compiled library's path, size and modification time, so a rebuilt
library is probed again and a good one costs a file read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

# One greedy token from the embedded GGUF: enough to run the CPU kernels that fault (matmul, tile config).
PROBE = (
    "import os, sys\n"
    "os.environ['OMP_NUM_THREADS'] = '1'  # a one-thread decode needs no OpenMP pool beside it\n"
    "from llama_cpp import Llama\n"
    "m = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)\n"
    "m.create_completion('Hello', max_tokens=1, temperature=0.0)\n"
    "print('llamacpp-ok')\n"
)
TIMEOUT_S = 120


def _library() -> Path | None:
    """The compiled CPU library of the installed llama-cpp-python (found without importing it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    for name in ("libggml-cpu.so", "libggml.so", "libllama.so", "libggml-cpu.dylib", "libllama.dylib"):
        if (lib / name).exists():
            return lib / name
    return None


def file_id(path: str | Path) -> str:
    """A file's identity in cache keys: its resolved path, size and modification time (a rebuilt or replaced
    file is another key)."""
    st = Path(path).stat()
    return f"{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _key(lib: Path) -> str:
    return hashlib.sha256(f"{file_id(lib)}|{sys.executable}".encode()).hexdigest()[:16]


def probe(gguf: Path | None = None) -> tuple[bool, str]:
    """Run one decode in a child process: (it worked, what happened)."""
    from mascot.files.model_files import embedded_gguf

    model = str(gguf or embedded_gguf())
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, model], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"a one-token decode did not finish in {TIMEOUT_S} s"
    if out.returncode == 0 and "llamacpp-ok" in out.stdout:
        return True, "ok"
    if out.returncode < 0:
        return False, f"a one-token decode was killed by signal {-out.returncode} (a CPU instruction this machine refuses)"
    tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
    return False, f"a one-token decode exited with code {out.returncode}: {tail[0][:200]}"


@lru_cache(maxsize=4)
def llamacpp_runs(cache_dir: str | Path | None = None, enabled: bool = True) -> bool:
    """True when the installed llama.cpp decodes on this CPU (probed once per build, then remembered under
    `<cache_dir>/llamacpp-probe/`; None: the default model cache). `enabled=False` trusts the build unprobed."""
    if not enabled:
        return True
    lib = _library()
    if lib is None:
        return False
    from mascot.files.model_files import default_cache_dir

    root = Path(cache_dir) if cache_dir else default_cache_dir()
    record = root / "llamacpp-probe" / f"{_key(lib)}.json"
    try:
        return bool(json.loads(record.read_text(encoding="utf-8"))["ok"])
    except (OSError, ValueError, KeyError):
        pass
    ok, why = probe()
    if not ok:
        log.warning("llama.cpp cannot run on this CPU (%s): the `auto` backend uses transformers instead. Rebuild it "
                    "for this CPU with `make llama-rebuild` (scripts/llama_cmake_args.py switches AMX and -march=native off).",
                    why)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ok": ok, "why": why, "library": str(lib)}), encoding="utf-8")
    tmp.replace(record)
    return ok
