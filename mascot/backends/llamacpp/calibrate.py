"""Which weight format serves each job fastest on this machine: measured, not guessed from the CPU's name.

llama.cpp's kernels differ by CPU far more than by vendor or flag: on one 2-core AMD EPYC the bfloat16 weights
prefilled prompts 1.5x faster than Q8_0 but decoded a single reply 1.4x slower, and a batch of eight
sequences ran fastest on Q8_0 with flash attention off. So the backend's formats are picked per job:

- `prefill`: prompts and scoring (the main model);
- `decode`: a single streamed reply after its prompt (the decoder model);
- `batch`: many sequences stepping together (best-of-N samples, rollouts: a shared persona card, each its own
  chat after it), on whichever of those two models runs it faster, with flash attention on or off as measured.

Every candidate format (`recode.TARGETS`) is measured in its own child process, so a kernel that faults or
hangs on this CPU costs that format only; a format that failed is recorded as unservable, and forcing it is
refused with the formats that work. The result is cached under `<cache_dir>/llamacpp-formats/`, keyed by the
compiled llama.cpp library, the CPU (model name and flags), the model file, the thread count and this module's
version, so it runs once per build and machine (`make model` runs it ahead of the first start). If the
measurement cannot run at all, the safe formats (`SAFE`, which every build serves) are used with a warning.

    python -m mascot.backends.llamacpp.calibrate [--model embedded] [--threads N] [--force] [--prune]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VERSION = 2
JOBS = ("prefill", "decode", "batch")
SAFE = {"prefill": "q8_0", "decode": "native"}  # kernels every llama.cpp CPU build has (no AVX512-BF16 needed)
PROMPT_TOKENS = 256
BATCH_SEQS = 8  # best-of-N selection draws a handful of samples of one prompt; eight is the measured width
TIMEOUT_S = 120.0  # one format, a first-time re-encode of the weights included
TIE = 0.05  # relative speed difference below which a measurement does not decide (see `choose`)


@dataclass
class FormatChoice:
    """The formats chosen per job, and the measurements behind them (tokens/s by format and job)."""

    prefill: str
    decode: str
    batch: str  # one of `prefill`, `decode`: the loaded model that steps batches
    batch_flash_attn: bool
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    unservable: dict[str, str] = field(default_factory=dict)  # format -> why it failed here
    cpu: str = ""
    threads: int = 0
    source: str = "measured"  # measured | cached | safe: <why>

    def describe(self) -> str:
        fa = "on" if self.batch_flash_attn else "off"
        return (f"prompts on {self.prefill}, single replies decode on {self.decode}, batches on {self.batch} "
                f"(flash attention {fa}); {self.source}")

    def servable(self) -> list[str]:
        from mascot.backends.llamacpp.recode import TARGETS

        return [f for f in TARGETS if f not in self.unservable]


def safe_choice(why: str) -> FormatChoice:
    return FormatChoice(SAFE["prefill"], SAFE["decode"], SAFE["prefill"], True, source=f"safe: {why}")


def choose(rates: dict[str, dict[str, float]], unservable: dict[str, str], cpu: str = "", threads: int = 0) -> FormatChoice:
    """The fastest servable format for prompts and for single-reply decoding; batches on the faster of those two
    models (two loaded models at most: each more is another copy of the weights in memory). Within `TIE` of
    the fastest, the file's own weights win for a job, and batches stay on the prompt model: differences that
    small are inside a shared machine's run-to-run noise, and the file's weights carry no re-encoding error."""
    ok = {f: r for f, r in rates.items() if f not in unservable and all(r.get(k, 0) > 0 for k in
                                                                       ("prefill", "decode", "batch_fa", "batch_nofa"))}
    if not ok:
        return safe_choice("no format could be measured: " + "; ".join(f"{f}: {w}" for f, w in unservable.items()))

    def fastest(job: str) -> str:
        best = max(ok, key=lambda f: ok[f][job])
        return "native" if "native" in ok and ok["native"][job] >= (1 - TIE) * ok[best][job] else best

    prefill, decode = fastest("prefill"), fastest("decode")

    def batch_rate(c: tuple[str, bool]) -> float:
        return ok[c[0]]["batch_fa" if c[1] else "batch_nofa"]

    options = [(f, on) for f in dict.fromkeys((prefill, decode)) for on in (True, False)]
    best = max(options, key=batch_rate)
    on_prompt_model = max((c for c in options if c[0] == prefill), key=batch_rate)
    batch, fa = on_prompt_model if batch_rate(on_prompt_model) >= (1 - TIE) * batch_rate(best) else best
    return FormatChoice(prefill, decode, batch, fa, rates, unservable, cpu, threads)


# ----------------------------------------------------------------------- the cache key
def _cpuinfo() -> tuple[str, str]:
    """(CPU model name, its flags line) from /proc/cpuinfo, or the platform's processor name and no flags."""
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = value.strip()
    except OSError:
        import platform

        name = platform.processor() or platform.machine()
    return name or "unknown CPU", flags


def cpu_identity() -> str:
    """The CPU's model name and a digest of its flags (two machines of one vendor may differ in both)."""
    name, flags = _cpuinfo()
    return f"{name} [{hashlib.sha256(flags.encode()).hexdigest()[:8]}]"


SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
              "amx_int8", "avx_vnni", "asimd", "sve", "i8mm", "bf16")


def machine() -> dict[str, Any]:
    """The CPU model, the SIMD flags llama.cpp's kernels depend on, and the core count: stated with every
    benchmark figure."""
    name, flags = _cpuinfo()
    present = set(flags.split())
    return {"cpu": name, "flags": [f for f in SIMD_FLAGS if f in present], "cores": len(os.sched_getaffinity(0))}


def cache_key(source: Path, threads: int) -> str:
    from mascot.backends.llamacpp.probe import _key, _library, file_id

    lib = _library()
    parts = [_key(lib) if lib else "no-library", cpu_identity(), file_id(source),
             str(threads), str(VERSION)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def record_path(source: Path, threads: int, cache_dir: str | Path | None) -> Path:
    from mascot.files.model_files import default_cache_dir

    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root / "llamacpp-formats" / f"{cache_key(source, threads)}.json"


def cached_choice(source: Path, threads: int, cache_dir: str | Path | None) -> FormatChoice | None:
    """The recorded choice for this build, CPU, model and thread count, or None."""
    try:
        data = json.loads(record_path(source, threads, cache_dir).read_text(encoding="utf-8"))
        choice = FormatChoice(**data)
    except (OSError, ValueError, TypeError):
        return None
    choice.source = "cached"
    return choice


# ----------------------------------------------------------------------- measuring
def calibrate(source: Path, threads: int, cache_dir: str | Path | None = None, *, formats: tuple[str, ...] | None = None,
              timeout_s: float = TIMEOUT_S, force: bool = False) -> FormatChoice:
    """The per-job formats for `source` on `threads` threads: the cached record, else measured now (each
    format in a child process) and recorded. Never raises for a failed measurement: falls back to `SAFE`."""
    from mascot.backends.llamacpp.recode import TARGETS

    if not force and (hit := cached_choice(source, threads, cache_dir)) is not None:
        return hit
    rates: dict[str, dict[str, float]] = {}
    unservable: dict[str, str] = {}
    started = time.perf_counter()
    log.warning("Measuring which llama.cpp weight format serves each job fastest on this machine (once per build "
                "and CPU; about half a minute, `make model` does it ahead of time).")
    for fmt in formats or TARGETS:
        ok, result = _measure_in_child(source, fmt, threads, cache_dir, timeout_s)
        if ok:
            rates[fmt] = result
        else:
            unservable[fmt] = result
            log.warning("llama.cpp weight format %s cannot be served on this machine: %s", fmt, result)
    choice = choose(rates, unservable, cpu_identity(), threads)
    if choice.source.startswith("safe"):
        log.warning("llama.cpp format calibration failed (%s); serving the safe formats.", choice.source[6:])
        return choice  # not recorded: the next start measures again
    path = record_path(source, threads, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(asdict(choice), indent=1), encoding="utf-8")
    tmp.replace(path)
    log.info("llama.cpp formats measured in %.1f s: %s", time.perf_counter() - started, choice.describe())
    return choice


def _measure_in_child(source: Path, fmt: str, threads: int, cache_dir: str | Path | None,
                      timeout_s: float) -> tuple[bool, Any]:
    """(True, tokens/s by job) or (False, why) for one format, measured in its own process."""
    cmd = [sys.executable, "-m", "mascot.backends.llamacpp.calibrate", "--measure", fmt, "--model", str(source),
           "--threads", str(threads)]
    if cache_dir:
        cmd += ["--cache-dir", str(cache_dir)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"the measurement did not finish in {timeout_s:.0f} s"
    except OSError as exc:
        return False, f"the measurement could not start ({exc})"
    if out.returncode < 0:
        return False, f"killed by signal {-out.returncode} (a CPU instruction this machine refuses)"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        return False, f"exited with code {out.returncode}: {tail[0][:200]}"
    try:
        return True, {k: float(v) for k, v in json.loads(lines[-1]).items()}
    except (ValueError, TypeError, AttributeError):
        return False, f"unreadable result {lines[-1][:100]!r}"


def measure(source: Path, fmt: str, threads: int, cache_dir: str | Path | None = None, rounds: int = 4) -> dict[str, float]:
    """Tokens/s of one format for each job, in this process: prefilling a `PROMPT_TOKENS` prompt, decoding one
    sequence after it, and stepping `BATCH_SEQS` sequences that share it (flash attention on and off)."""
    from mascot.backends.llamacpp.recode import recode_gguf
    from mascot.backends.llamacpp.runtime import import_llama_cpp
    from mascot.backends.llamacpp.weights import load_model

    ll = import_llama_cpp()  # first: llama.cpp's OpenMP runtime starts under its own wait policy
    from llama_cpp import _internals
    model = load_model(ll, recode_gguf(source, fmt, cache_dir), source)
    text = b"I moved to a new city for work and I feel really lonely in the evenings, so I call my sister. " * 16
    prompt = model.tokenize(text, True, False)[:PROMPT_TOKENS]
    batch = ll.llama_batch_init(PROMPT_TOKENS, 0, 1)

    def context(seqs: int, flash_attn: bool) -> Any:
        p = ll.llama_context_default_params()
        p.n_ctx = seqs * (PROMPT_TOKENS + rounds * 8 + 8)
        p.n_batch = p.n_ubatch = PROMPT_TOKENS
        p.n_seq_max, p.kv_unified, p.no_perf = seqs, True, True
        p.n_threads = p.n_threads_batch = threads
        p.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        return _internals.LlamaContext(model=model, params=p, verbose=False)

    def decode(ctx: Any, entries: list[tuple[int, int, int, bool]]) -> float:
        batch.n_tokens = len(entries)
        for j, (tok, pos, seq, logits) in enumerate(entries):
            batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = tok, pos, 1, logits
            batch.seq_id[j][0] = seq
        t = time.perf_counter()
        if ll.llama_decode(ctx.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - t

    def steps(ctx: Any, seqs: int, n: int) -> float:
        """Fastest decode step of `seqs` sequences after the prompt in sequence 0: each other sequence shares
        its first half (a persona card) and has a tail of its own (another chat), as batches have in use."""
        mem = ll.llama_get_memory(ctx.ctx)
        half = len(prompt) // 2
        for s in range(1, seqs):
            ll.llama_memory_seq_cp(mem, 0, s, 0, half)
            tail = prompt[half:][s % 7:] + prompt[half:][:s % 7]  # same length, other tokens at each position
            decode(ctx, [(t, half + i, s, False) for i, t in enumerate(tail)])
        times = [decode(ctx, [(prompt[-1], len(prompt) + i, s, True) for s in range(seqs)]) for i in range(n)]
        return min(times[1:])  # the quickest step: other processes on a shared machine only ever add time

    try:
        out: dict[str, float] = {}
        ctx = context(BATCH_SEQS, True)
        mem = ll.llama_get_memory(ctx.ctx)
        full = [(t, p, 0, False) for p, t in enumerate(prompt)]
        decode(ctx, full[:16])  # warm-up
        times = []
        for _ in range(rounds):
            ll.llama_memory_clear(mem, True)
            times.append(decode(ctx, full))
        out["prefill"] = len(prompt) / min(times)
        ll.llama_memory_clear(mem, True)
        decode(ctx, full)
        out["decode"] = 1.0 / steps(ctx, 1, rounds * 12)
        ll.llama_memory_seq_rm(mem, 0, len(prompt), -1)
        out["batch_fa"] = BATCH_SEQS / steps(ctx, BATCH_SEQS, rounds * 2)
        ctx.close()
        ctx = context(BATCH_SEQS, False)
        decode(ctx, full)
        out["batch_nofa"] = BATCH_SEQS / steps(ctx, BATCH_SEQS, rounds * 2)
        ctx.close()
        return out
    finally:
        ll.llama_batch_free(batch)


def prune(choice: FormatChoice, source: Path, cache_dir: str | Path | None = None) -> list[Path]:
    """Delete the re-encoded weights that `choice` serves no job with (an image or a small disk keeps only what
    it serves; a format forced later is re-encoded again on first use). Returns the files removed."""
    from mascot.backends.llamacpp.recode import TARGETS, recoded_path

    used = {choice.prefill, choice.decode, choice.batch}
    removed = []
    for fmt in TARGETS:
        path = recoded_path(source, fmt, cache_dir)
        if fmt != "native" and fmt not in used and path.exists():
            path.unlink()
            removed.append(path)
    return removed


def table(choice: FormatChoice) -> str:
    """The measurements as a small text table (tokens/s), the chosen formats marked."""
    rows = [f"{'format':8} {'prefill':>9} {'decode':>8} {'batch x' + str(BATCH_SEQS):>9} {'(no FA)':>8}"]
    for fmt, r in choice.rates.items():
        rows.append(f"{fmt:8} {r['prefill']:9.0f} {r['decode']:8.1f} {r['batch_fa']:9.0f} {r['batch_nofa']:8.0f}")
    rows += [f"{fmt:8} unservable: {why}" for fmt, why in choice.unservable.items()]
    rows.append(f"chosen on {choice.cpu or cpu_identity()}, {choice.threads} threads: {choice.describe()}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mascot.backends.llamacpp.calibrate",
                                 description="Measure which llama.cpp weight format serves each job fastest here.")
    ap.add_argument("--model", default="embedded", help="`embedded` or a .gguf file")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: every core this process may use)")
    ap.add_argument("--cache-dir", default=None, help="where re-encoded weights and the record live")
    ap.add_argument("--force", action="store_true", help="measure again even if a record exists")
    ap.add_argument("--prune", action="store_true", help="then delete the re-encoded weights no job is served with")
    ap.add_argument("--measure", default=None, help="(internal) measure one format in this process, print JSON")
    args = ap.parse_args(argv)
    from mascot.backends.llamacpp.weights import resolve_gguf

    source = resolve_gguf(args.model)
    threads = args.threads or len(os.sched_getaffinity(0))
    if args.measure:
        print(json.dumps(measure(source, args.measure, threads, args.cache_dir)))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    choice = calibrate(source, threads, args.cache_dir, force=args.force)
    print(table(choice))
    if args.prune:
        for path in prune(choice, source, args.cache_dir):
            print(f"removed {path} (no job is served with it here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
