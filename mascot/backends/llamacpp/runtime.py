"""llama.cpp's runtime in this process: importing it under its own OpenMP wait policy, and choosing how many
threads decode.

One process has one OpenMP runtime: libgomp reads `OMP_WAIT_POLICY` once, when it is loaded, and torch's
bundled copy has the same soname, so whoever loads first sets the policy for both. Entry points call
`mascot.settings.apply_process_defaults()`, which sets `PASSIVE` for torch (sleeping waits cost nothing
measurable there), but under `PASSIVE` this OpenMP build of llama.cpp decodes about 3x slower.
`import_llama_cpp()` therefore loads llama.cpp's runtime under its own policy (`omp_wait_policy`, default: the
variable unset, libgomp's spin-then-sleep) and restores the variable afterwards, so a training process (which
never loads llama.cpp) keeps `PASSIVE` for torch. Chat, CLI and evaluation load the backend before torch.

Decode threads are calibrated at load: all cores, or one thread when other processes hold the cores. On a machine
whose load average shows no other work the measurement is skipped and all cores decode.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from mascot.errors import BackendError

log = logging.getLogger(__name__)


def import_llama_cpp(omp_wait_policy: str = "") -> Any:
    """Import llama_cpp with llama.cpp's own OpenMP wait policy, leaving the process setting as it was.

    `omp_wait_policy`: the policy llama.cpp's OpenMP runtime starts with; "" leaves the variable unset while it
    initialises (libgomp's default: spin briefly, then sleep). Only the first import in a process decides."""
    if "llama_cpp" in sys.modules:
        return sys.modules["llama_cpp"]
    if _openmp_started():
        log.warning("An OpenMP runtime (torch's) started before llama.cpp, so llama.cpp shares its OMP_WAIT_POLICY=%s; "
                    "load the llamacpp backend before importing torch for full speed.", os.environ.get("OMP_WAIT_POLICY"))
    saved = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if omp_wait_policy:
        os.environ["OMP_WAIT_POLICY"] = omp_wait_policy
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


class ThreadCalibration:
    """`LlamaCppBackend`'s thread choice, measured on its chat context (`ctx`, `mem`, `_decode`) at load."""

    def _calibrate_threads(self, steps: int = 8, budget_s: float = 0.4, idle_load: float = 0.3) -> None:
        """Pick the faster of all cores and one thread for decoding, measured here and now; when the 1-minute
        load average per core is below `idle_load`, nobody else holds the cores and all of them decode without
        measuring (the measurement costs about 0.3 s of every start on 2 cores).

        On an idle machine all cores win; when other processes hold the cores, OpenMP threads wait on each
        other at every barrier and one thread decodes faster (measured 37 vs 11 tokens/s at load 7 on 2 cores).
        Each setting gets at most `steps` decode steps or `budget_s` seconds: under a passive OpenMP wait
        policy on busy cores one all-cores step took about a second, and an unbounded loop cost 37 s at load."""
        load = os.getloadavg()[0] / self.cores if hasattr(os, "getloadavg") else 1.0
        with self._lock:
            if load < idle_load:
                self.calibration = {"skipped_at_load_per_core": round(load, 2)}
                self.threads = self.cores
            else:
                self.calibration = {}
                bos = max(self._model.token_bos(), 0)
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
                self._forget_slots()
            # batches and prefill follow the same choice: under contention two threads collapsed there too (contexts
            # made later take `self.threads` when they are made)
            if self._chat_context is not None:
                self.ll.llama_set_n_threads(self.ctx, self.threads, self.threads)
            if self._decoder is not None:
                self.ll.llama_set_n_threads(self._decoder[2], self.threads, self.threads)
        log.info("llama.cpp decode threads: %d (steps/s by threads: %s)", self.threads, self.calibration)
