"""The llama.cpp format calibration (mascot/backends/llamacpp/calibrate.py): per-job choice from measurements,
the record cached per build and CPU, a crashing or hanging measurement falling back to the safe formats, and a
forced format the machine cannot serve refused with the ones it can. No model is loaded here."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mascot.backends.llamacpp import calibrate as cal
from mascot.backends.llamacpp.weights import choose_formats
from mascot.errors import BackendError

RATES = {  # tokens/s as measured on a 2-core AMD EPYC (prefill, decode, 8 sequences with and without flash attention)
    "native": {"prefill": 375, "decode": 124.3, "batch_fa": 231, "batch_nofa": 237},
    "q8_0": {"prefill": 848, "decode": 127.6, "batch_fa": 286, "batch_nofa": 293},
    "bf16": {"prefill": 1127, "decode": 86.7, "batch_fa": 285, "batch_nofa": 294},
    "f32": {"prefill": 753, "decode": 55.6, "batch_fa": 218, "batch_nofa": 219},
}


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 64)
    return path


def test_each_job_gets_its_fastest_format_and_batches_stay_on_a_loaded_model():
    c = cal.choose(RATES, {})
    # q8_0 decodes 2.6% faster than the file's own Q4_1: inside the noise, so the file's weights decode
    assert (c.prefill, c.decode, c.batch, c.batch_flash_attn) == ("bf16", "native", "bf16", False)
    clear = {**RATES, "q8_0": {**RATES["q8_0"], "decode": 140.0}}
    assert cal.choose(clear, {}).decode == "q8_0"
    faster_f32 = {**RATES, "f32": {**RATES["f32"], "batch_nofa": 999}}
    assert cal.choose(faster_f32, {}).batch in ("bf16", "native"), "a third model is never loaded for batches"
    decoder_batches = {**clear, "q8_0": {**clear["q8_0"], "batch_fa": 400.0}}
    assert (cal.choose(decoder_batches, {}).batch, cal.choose(decoder_batches, {}).batch_flash_attn) == ("q8_0", True)
    c = cal.choose(RATES, {"bf16": "killed by signal 4"})
    assert (c.prefill, c.decode, c.batch) == ("q8_0", "native", "q8_0") and "bf16" not in c.servable()
    assert "prompts on q8_0" in c.describe() and "unservable" in cal.table(c)


def test_measurements_are_cached_per_machine_and_reused(gguf, tmp_path, monkeypatch, caplog):
    calls = []

    def fake(source, fmt, threads, cache_dir, timeout_s):
        calls.append(fmt)
        return True, RATES[fmt]

    monkeypatch.setattr(cal, "_measure_in_child", fake)
    with caplog.at_level(logging.WARNING, logger=cal.__name__):
        first = cal.calibrate(gguf, 2, tmp_path)
    assert first.source == "measured" and calls == list(RATES)
    assert "once per build and CPU" in caplog.text, "a start that measures says why it takes longer"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=cal.__name__):
        again = cal.calibrate(gguf, 2, tmp_path)
    assert again.source == "cached" and len(calls) == len(RATES) and again.prefill == first.prefill
    assert not caplog.text
    cal.calibrate(gguf, 1, tmp_path)  # another thread count is another record
    assert len(calls) == 2 * len(RATES)
    assert len(list((tmp_path / "llamacpp-formats").glob("*.json"))) == 2
    gguf.write_bytes(b"GGUF" + b"\1" * 80)  # another model file: measured again
    assert cal.calibrate(gguf, 2, tmp_path).source == "measured"


def test_a_damaged_record_is_measured_again(gguf, tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "_measure_in_child", lambda s, f, t, c, x: (True, RATES[f]))
    cal.calibrate(gguf, 2, tmp_path)
    cal.record_path(gguf, 2, tmp_path).write_text("{not json", encoding="utf-8")
    assert cal.calibrate(gguf, 2, tmp_path).source == "measured"


def test_crashing_measurements_fall_back_to_the_safe_formats_with_a_warning(gguf, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(cal, "_measure_in_child", lambda *a: (False, "killed by signal 4 (a CPU instruction ...)"))
    with caplog.at_level(logging.WARNING, logger=cal.__name__):
        c = cal.calibrate(gguf, 2, tmp_path)
    assert (c.prefill, c.decode) == (cal.SAFE["prefill"], cal.SAFE["decode"]) and c.source.startswith("safe")
    assert "calibration failed" in caplog.text and "signal 4" in caplog.text
    assert not cal.record_path(gguf, 2, tmp_path).exists(), "a failed calibration is tried again next start"


def test_a_child_that_fails_or_hangs_is_reported_not_raised(gguf):
    ok, why = cal._measure_in_child(gguf, "q8_0", 1, None, timeout_s=0.05)
    assert not ok and "did not finish in" in why
    ok, why = cal._measure_in_child(gguf, "q2_k", 1, None, timeout_s=60)
    assert not ok and "exited with code" in why


def test_a_forced_format_the_machine_cannot_serve_is_refused_with_the_ones_it_can(gguf, tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "_measure_in_child",
                        lambda s, f, t, c, x: (False, "killed by signal 4") if f == "bf16" else (True, RATES[f]))
    assert choose_formats("auto", "auto", gguf, 2, tmp_path)[:2] == ("q8_0", "native")
    with pytest.raises(BackendError, match=r"'bf16'.*signal 4.*auto, native, q8_0, f32"):
        choose_formats("bf16", "same", gguf, 2, tmp_path)
    with pytest.raises(BackendError, match="decode_weights"):
        choose_formats("q8_0", "bf16", gguf, 2, tmp_path)
    assert choose_formats("native", "same", gguf, 2, tmp_path) == ("native", "same", None)
    with pytest.raises(BackendError, match="valid: auto, native"):
        choose_formats("q2_k", "auto", gguf, 2, tmp_path)


def test_prune_keeps_only_the_weights_a_job_is_served_with(gguf, tmp_path):
    from mascot.backends.llamacpp.recode import recoded_path

    for fmt in ("q8_0", "bf16", "f32"):
        path = recoded_path(gguf, fmt, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF")
    choice = cal.choose(RATES, {})  # bf16 prompts and batches, the file's own weights decoding
    removed = cal.prune(choice, gguf, tmp_path)
    assert sorted(p.name for p in removed) == sorted(recoded_path(gguf, f, tmp_path).name for f in ("q8_0", "f32"))
    assert recoded_path(gguf, "bf16", tmp_path).exists() and gguf.exists()
