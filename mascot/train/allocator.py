"""Keep freed memory in the training process instead of handing it back to the kernel after every step.

torch takes each CPU tensor from glibc's malloc, and glibc serves every block of 128 KB to 32 MB from its own
`mmap` (the threshold grows with use) and each block above 32 MB always, unmapping it again on free. A training
step allocates and frees the same logits, activations and gradients every time, so the kernel maps and zeroes
them again, 4 KB page by page: three 1-thread GRPO workers on a 2-core VM spent 60-85 % of their CPU time in the
kernel (benchmarks/grpo_step.py reports kernel time and page faults). With mmap off and trimming off, freed
blocks go back to malloc's free lists and the next step reuses them: the process keeps its peak size, which a
training process reaches in its first step anyway.

Transparent huge pages (torch's THP_MEM_ALLOC_ENABLE) cost the same time instead: with this
kernel's `defrag=madvise` each 2 MB fault stalls in direct compaction once memory is fragmented.

`python -m mascot train ... --keep-freed-memory no` (or `MASCOT_KEEP_FREED_MEMORY=0`, which the command reads)
switches this off, e.g. to measure the difference; the entry points pass the switch down as `enabled`.

The price is memory: a process keeps its peak, and with mmap off a step's variously sized logits fragment the heap.
A GRPO worker of the tiny-cpu recipe (llama.cpp rollouts, Beacon's longer replies) peaks at 9.4 GB and three such
workers beside the parent ran a 24 GB machine out of memory (the kernel killed one). So parallel workers
keep freed memory only when the machine has room for all of them (`workers_keep_freed_memory`); otherwise they run
with glibc's default, which costs kernel time but not memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
_TRIM_NEVER = 2**31 - 1  # the largest value mallopt's int takes: the heap top is never trimmed in practice

_applied: bool | None = None
ENV = "MASCOT_KEEP_FREED_MEMORY"
# the largest worker measured with freed memory kept: Beacon's, 9.4 GB peak RSS alone (8.5 GB when the OOM killer took it)
WORKER_PEAK_GB = 10.0


def parse_switch(value: str | None) -> bool:
    """The MASCOT_KEEP_FREED_MEMORY switch as an entry point read it (None: not set, which means on)."""
    return (value or "1").strip().lower() not in ("0", "false", "no", "off")


def keep_freed_memory(enabled: bool = True) -> bool:
    """Make glibc's malloc keep freed blocks for reuse (no mmap, no trimming) in this process; True if applied.

    Idempotent; does nothing (and returns False) off Linux/glibc or when not `enabled`."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not enabled:
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, _TRIM_NEVER) == 1
    if not ok:
        log.warning("mallopt refused to keep freed memory; training runs with glibc's default, with more kernel time per step.")
    _applied = ok
    return ok


def available_memory_gb(meminfo: str = "/proc/meminfo") -> float | None:
    """MemAvailable from /proc/meminfo in GB (None where there is no such file, e.g. off Linux)."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return None
    return None


def workers_keep_freed_memory(workers: int, available_gb: float | None = None,
                              per_worker_gb: float = WORKER_PEAK_GB, *, enabled: bool = True) -> tuple[bool, str]:
    """Whether `workers` training processes started side by side may each keep their freed memory, and why.

    Yes only when the memory available now holds every worker at the measured peak of one that does; an unknown
    amount of memory, or the switch off (`enabled=False`), answers no."""
    if not enabled:
        return False, f"{ENV}=0"
    if available_gb is None:
        available_gb = available_memory_gb()
    if available_gb is None:
        return False, "available memory unknown"
    need = workers * per_worker_gb
    if available_gb < need:
        return False, (f"{workers} workers x {per_worker_gb:g} GB = {need:g} GB > {available_gb:.1f} GB available: "
                       "glibc's default allocator (less memory, more kernel time)")
    return True, f"{available_gb:.1f} GB available for {workers} workers x {per_worker_gb:g} GB"
