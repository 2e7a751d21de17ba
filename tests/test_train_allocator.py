"""The training processes keep freed memory for reuse (mascot/train/allocator.py).

Each check runs in a child process: mallopt changes the whole process's allocator, which the test runner's
own process should not inherit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the probe is an entry point: it reads the switch from its environment, as `python -m mascot train` does
PROBE = r"""
import json, os, resource
from mascot.train import allocator
enabled = allocator.parse_switch(os.environ.get(allocator.ENV))
first = allocator.keep_freed_memory(enabled)
again = allocator.keep_freed_memory(enabled)
faults = []
for _ in range(2):  # touch and free a 64 MB block twice: above glibc's largest mmap threshold (32 MB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"first": first, "again": again, "faults": faults}))
"""


def probe(**env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                           reason="mallopt is glibc's")


@glibc
def test_freed_block_is_reused_without_page_faults() -> None:
    r = probe()
    assert r["first"] is True and r["again"] is True  # applied once, idempotent
    # the first touch maps 16,384 pages; the second finds the freed block in malloc's free lists
    assert r["faults"][0] > 10_000 and r["faults"][1] < r["faults"][0] / 10


@glibc
def test_switched_off_by_the_environment_as_glibc_default() -> None:
    r = probe(MASCOT_KEEP_FREED_MEMORY="0")
    assert r["first"] is False and r["again"] is False
    # glibc's default: the 64 MB block is mmapped and unmapped each time, so the second touch faults again
    assert r["faults"][1] > 10_000


def test_parallel_workers_keep_freed_memory_only_when_all_fit(tmp_path: Path) -> None:
    """Three workers at the measured 9.4 GB peak (10 GB with headroom) do not fit a 24 GB machine (one was killed there): they return freed
    memory; two fit 22 GB; an unknown amount of memory or the switch answers no."""
    from mascot.train import allocator

    keep, why = allocator.workers_keep_freed_memory(3, available_gb=22.0)
    assert keep is False and "30 GB > 22.0 GB" in why
    assert allocator.workers_keep_freed_memory(2, available_gb=22.0)[0] is True  # 20 GB
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemAvailable:   23068672 kB\n", encoding="ascii")
    assert allocator.available_memory_gb(str(meminfo)) == 22.0
    assert allocator.available_memory_gb(str(tmp_path / "missing")) is None
    assert allocator.workers_keep_freed_memory(1, available_gb=100.0, enabled=False) == (False, f"{allocator.ENV}=0")


def test_the_switch_is_read_by_the_command_and_passed_down(monkeypatch) -> None:
    """`python -m mascot train` reads --keep-freed-memory, else MASCOT_KEEP_FREED_MEMORY; nothing below it reads the
    environment."""
    import argparse

    from mascot.train import allocator
    from mascot.train.cli import keep_freed_memory_flag

    assert [allocator.parse_switch(v) for v in (None, "", "1", "yes", "0", "off", "No")] == [True, True, True, True,
                                                                                              False, False, False]
    monkeypatch.setenv(allocator.ENV, "0")
    assert keep_freed_memory_flag(argparse.Namespace(keep_freed_memory=None)) is False
    assert keep_freed_memory_flag(argparse.Namespace(keep_freed_memory="yes")) is True  # the flag wins
    monkeypatch.delenv(allocator.ENV)
    assert keep_freed_memory_flag(argparse.Namespace(keep_freed_memory=None)) is True
    assert keep_freed_memory_flag(argparse.Namespace(keep_freed_memory="no")) is False
