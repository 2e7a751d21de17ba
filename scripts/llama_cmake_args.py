#!/usr/bin/env python3
"""CMAKE_ARGS for building llama-cpp-python on this machine: the CPU's own vector extensions, never AMX.

llama.cpp's default build uses `-march=native`, which turns on AMX whenever the CPU reports it. On the
virtual machines this project runs on, the CPU reports amx_tile/amx_int8 but the hypervisor does not let a
process use the tile registers: the first `ldtilecfg` in libggml-cpu raises a general-protection fault and
every llama.cpp decode segfaults. This script switches `GGML_NATIVE` off and turns on exactly the x86
extensions listed in /proc/cpuinfo (AVX2, FMA, AVX-512, VNNI, ...), with AMX always off.

    CMAKE_ARGS="$(python3 scripts/llama_cmake_args.py)" pip install --no-cache-dir llama-cpp-python==0.3.36

Standard library only: it runs before the virtual environment has anything installed.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

# ggml CMake option -> the /proc/cpuinfo flags it needs (all of them).
X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first CPU in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_args(flags: set[str]) -> list[str]:
    """`-D` options: native off, each x86 extension on exactly when the CPU has it, AMX off."""
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{opt}={'ON' if all(f in flags for f in need) else 'OFF'}" for opt, need in X86_OPTIONS.items()]
    args += [f"-D{opt}=OFF" for opt in ALWAYS_OFF]
    return args


def main() -> int:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return 0  # other architectures: llama.cpp's own defaults (no AMX there)
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    flags = cpu_flags(text)
    if not flags:  # unknown CPU: a conservative AVX2 baseline rather than -march=native
        flags = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
    print(" ".join(cmake_args(flags)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
