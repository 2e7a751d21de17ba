"""The llama.cpp build flags (AMX never on, the CPU's own extensions) and the crash probe behind `auto`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mascot.backends import resolve_kind
from mascot.backends.llamacpp import probe as llamacpp_probe

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("llama_cmake_args", ROOT / "scripts" / "llama_cmake_args.py")
cmake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmake)  # type: ignore[union-attr]

SAPPHIRE = "flags\t\t: fpu sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw " \
           "avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16\n"


def test_amx_is_always_off_even_when_the_cpu_reports_it() -> None:
    args = cmake.cmake_args(cmake.cpu_flags(SAPPHIRE))
    assert "-DGGML_NATIVE=OFF" in args
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)
    assert not any("AMX" in a and a.endswith("=ON") for a in args)
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_FMA=ON"} <= set(args)


def test_extensions_follow_the_cpu_flags() -> None:
    args = set(cmake.cmake_args(cmake.cpu_flags("flags : sse4_2 avx avx2 fma f16c\n")))
    assert {"-DGGML_AVX2=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_BMI2=OFF"} <= args
    # AVX-512 needs all five foundation subsets, not just avx512f
    assert "-DGGML_AVX512=OFF" in cmake.cmake_args({"avx512f", "avx512bw"})
    assert cmake.cpu_flags("processor : 0\nmodel name : x\n") == set()


def test_a_crashing_build_makes_auto_fall_back_to_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that dies by a signal is recorded once; `auto` then picks transformers and says how to rebuild."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    calls: list[int] = []
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n"
    monkeypatch.setattr(llamacpp_probe, "PROBE", crash)
    real_probe = llamacpp_probe.probe

    def counted(gguf=None):
        calls.append(1)
        return real_probe(gguf)

    monkeypatch.setattr(llamacpp_probe, "probe", counted)
    llamacpp_probe.llamacpp_runs.cache_clear()
    try:
        assert resolve_kind("auto", cache_dir=tmp_path) == "transformers"
        records = list((tmp_path / "llamacpp-probe").glob("*.json"))
        assert len(records) == 1
        saved = json.loads(records[0].read_text())
        assert saved["ok"] is False and "signal 11" in saved["why"]
        llamacpp_probe.llamacpp_runs.cache_clear()
        assert resolve_kind("auto", cache_dir=tmp_path) == "transformers" and len(calls) == 1  # the verdict is read back, not re-probed
        assert resolve_kind("llamacpp", cache_dir=tmp_path) == "llamacpp"  # an explicit choice is never overridden
        # probe=False (MASCOT_LLAMACPP_PROBE=0) trusts the build without asking the recorded verdict
        assert resolve_kind("auto", cache_dir=tmp_path, probe=False) == "llamacpp" and len(calls) == 1
    finally:
        llamacpp_probe.llamacpp_runs.cache_clear()


@pytest.mark.model
def test_the_installed_build_passes_the_probe() -> None:
    """The build `make` installs (AMX off) decodes here: the probe a crashed -march=native build failed."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    ok, why = llamacpp_probe.probe()
    assert ok, why
