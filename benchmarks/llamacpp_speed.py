"""CPU chat speed, side by side in one run: plain llama-cpp-python (no adapter, the reference),
the project's llamacpp backend with the persona adapters switching every turn (its default: bfloat16 weights on
CPUs with AVX512-BF16, else Q8_0, re-encoded once from the embedded Q4_1 file, for prompts and batches, and the
file's Q4_1 weights for decoding a single reply; `MASCOT_LLAMACPP_WEIGHTS` picks the first format, and
`llamacpp-q8_0`, `llamacpp-bf16` and `llamacpp-native` serve one format throughout), and the transformers bf16 backend. Each runs in its own process (own OpenMP runtime and peak RSS), on the same prompts.

Reported per engine:
- first token: user message -> first streamed speaker token, the LLM director's decision included;
- decode tokens/s per speaker (speaker prompts, adapter switched every call, 64 greedy tokens), and the
  same against plain llama-cpp-python interleaved prompt by prompt in one process (robust to load swings);
- the whole group turn with the LLM director (`--mode prompted`, it picks how many speak) and the whole
  three-speaker group turn (round-robin director: three speakers, no director call);
- batched generation throughput vs one-at-a-time (16 speaker prompts through one adapter, the speakers'
  own sampling settings and 64-token budget; one-at-a-time reuses each call's cached persona prefix), and the
  same for 16 samples of one prompt (Stage-1 candidate generation) and for 8 (best-of-N selection);
- peak RSS with all persona adapters loaded.
Targets: decode >= 0.95x plain, first token <= 0.4 s, group turn <= 4 s, 16 different prompts batched >= 2x
one-at-a-time, 8 samples of one prompt >= 3x. The CPU model and SIMD flags are written with the figures.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llamacpp_speed.py [--rounds 3] [--json runs/bench/llamacpp.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = [
    "I moved to a new city for work and I feel really lonely in the evenings.",
    "I failed my driving test for the second time and I feel like an idiot.",
    "My best friend forgot my birthday and I'm more hurt than I want to admit.",
    "I have a big presentation tomorrow and my heart is already racing.",
]


def speaker_prompts(n: int, persona: str | None = None) -> list[tuple[str, list[dict[str, str]]]]:
    """(persona key, chat) for n speaker turns over bundled scenarios, personas in turn (or one persona)."""
    from mascot.data import load_scenarios
    from mascot.group.personas import load_pack
    from mascot.group.prompts import speaker_messages

    pack = load_pack("emotional-support")
    scenarios = [s for s in load_scenarios("bundled", split="train") if s.setting == pack.setting]
    out = [(p.key, speaker_messages(p, pack.active, s.to_dialogue())) for s in scenarios for p in pack.active
           if persona in (None, p.key)]
    return out[:n]


def load(kind: str, threads: int | None, options: dict[str, Any]) -> tuple[Any, Any]:
    """(backend or plain Llama, engine or None); adapters from checkpoints/ attached for the engines.
    `options`: the backend options from `MASCOT_*` (`Settings.backend_options`); `threads` wins when given."""
    if kind == "plain":
        from mascot.backends.llamacpp.runtime import import_llama_cpp
        from mascot.files.model_files import embedded_gguf

        ll = import_llama_cpp(str(options.get("omp_wait_policy") or ""))
        n = threads or len(os.sched_getaffinity(0))
        return ll.Llama(str(embedded_gguf()), n_ctx=2048, n_threads=n, n_threads_batch=n, verbose=False), None
    from mascot.backends import load_backend
    from mascot.files.checkpoints import find_run
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.personas import load_pack

    # llamacpp: the options as set (by default Q8_0 or bf16 prompts, single replies decoding on the file's Q4_1);
    # llamacpp-W: W throughout
    weights = kind.split("-", 1)[1] if kind.startswith("llamacpp-") else None  # llamacpp-native, llamacpp-q8_0, ...
    kind = "llamacpp" if weights else kind
    chosen = {"weights": weights, "decode_weights": "same"} if weights else {}
    backend = load_backend(kind, **{**options, "model": "embedded", "dtype": "bfloat16", "device": "cpu",
                                    "threads": threads or options.get("threads"), **chosen})
    engine = Engine(EngineConfig(backend=kind), backend, run_dir=find_run(str(ROOT / "checkpoints")))
    warnings = engine.attach_adapters(load_pack("emotional-support"))
    if warnings:
        raise SystemExit(f"{kind}: adapters did not load: {warnings}")
    return backend, engine


def decode_rates(kind: str, obj: Any, prompts: list, params: Any) -> tuple[list[float], list[float]]:
    """(first-token seconds, decode tokens/s) per speaker call, the persona adapter switching every call."""
    firsts, rates = [], []
    for key, chat in prompts:
        t0 = time.perf_counter()
        t1, n = 0.0, 0
        if kind == "plain":
            stream = obj.create_chat_completion(chat, max_tokens=params.max_new_tokens, temperature=0.0, stream=True,
                                                repeat_penalty=1.0)
            for chunk in stream:
                if chunk["choices"][0]["delta"].get("content"):
                    n += 1
                    t1 = t1 or time.perf_counter()
        else:
            text = ""
            for delta in obj.stream(chat, params, adapter=f"speaker-{key}"):
                text += delta
                t1 = t1 or time.perf_counter()
            n = obj.count_tokens(text)
        end = time.perf_counter()
        if n > 8:
            firsts.append(t1 - t0)
            rates.append((n - 1) / (end - t1))
    return firsts, rates


def group_turns(backend: Any, rounds: int, mode: str) -> dict[str, float]:
    from mascot.group.chat import DirectiveEvent, GroupChat, TokenEvent
    from mascot.group.dialogue import Dialogue
    from mascot.group.personas import load_pack

    pack = load_pack("emotional-support")
    first, turn, speakers = [], [], []
    for r in range(rounds + 1):  # the first turn warms up
        group = GroupChat(backend, pack.active, mode=mode, max_speakers=3)
        t0 = time.perf_counter()
        got, n = None, 0
        for e in group.respond(Dialogue(), MESSAGES[r % len(MESSAGES)], seed=r):
            if isinstance(e, TokenEvent) and got is None:
                got = time.perf_counter() - t0
            if isinstance(e, DirectiveEvent) and e.decision.directive is not None:
                n += 1
        if r:
            first.append(got if got is not None else float("nan"))
            turn.append(time.perf_counter() - t0)
            speakers.append(n)
    return {"first_token_s": statistics.median(first), "first_token_s_max": max(first),
            "first_token_s_p90": sorted(first)[min(len(first) - 1, int(0.9 * len(first)))],
            "group_turn_s": statistics.median(turn), "speakers_per_turn": statistics.mean(speakers)}


def batched(backend: Any, prompts: list, params: Any, prefix: str = "") -> dict[str, float]:
    """Tokens/s for the same chats as one generate() call vs one call each, through Anchor's adapter, as
    Speaker.reply_batch groups a rollout step by adapter. Two workloads: Anchor's replies to 16 scenarios
    (rollouts, evaluation), 16 samples of one chat (Stage-1 candidate generation: K replies per context), and 8
    samples of one chat (best-of-N selection)."""
    chats = [c for _, c in prompts]
    backend.generate(chats[:2], params.with_(max_new_tokens=4), adapter="speaker-anchor")  # warm-up
    out: dict[str, float] = {"batch": len(chats)}
    for name, work in (("", chats), ("same_prompt_", [chats[0]] * len(chats)), ("samples8_", [chats[0]] * 8)):
        t = time.perf_counter()
        one = sum(backend.generate([c], params.with_(seed=100 + i), adapter="speaker-anchor")[0].completion_tokens
                  for i, c in enumerate(work))
        t_one = time.perf_counter() - t
        t = time.perf_counter()
        many = sum(c.completion_tokens for c in backend.generate(work, params.with_(seed=100), adapter="speaker-anchor"))
        t_many = time.perf_counter() - t
        out.update({f"{name}one_at_a_time_tok_s": one / t_one, f"{name}batched_tok_s": many / t_many,
                    f"{name}batched_speedup": (many / t_many) / (one / t_one)})
    return out


def measure(kind: str, rounds: int, mode: str, threads: int | None, options: dict[str, Any]) -> dict[str, Any]:
    obj, _engine = load(kind, threads, options)
    from mascot.backends.base import GenerationParams

    decode = GenerationParams(max_new_tokens=64, temperature=0.0)
    prompts = speaker_prompts(16)
    decode_rates(kind, obj, prompts[:1], decode.with_(max_new_tokens=8))  # warm-up
    firsts, rates = decode_rates(kind, obj, prompts[:6], decode)
    print(f"  {kind}: decode done ({statistics.median(rates):.1f} tok/s)", file=sys.stderr, flush=True)
    row: dict[str, Any] = {"kind": kind, "speaker_prompt_first_token_s": statistics.median(firsts),
                           "decode_tok_s": statistics.median(rates)}
    if kind.startswith("llamacpp"):  # the same comparison interleaved prompt by prompt, so load swings hit both alike
        plain, _ = load("plain", obj.threads, options)
        pairs = [(decode_rates("plain", plain, [p], decode)[1], decode_rates(kind, obj, [p], decode)[1]) for p in prompts[:6]]
        pairs = [(a[0], b[0]) for a, b in pairs if a and b]
        row["interleaved_plain_decode_tok_s"] = statistics.median(a for a, _ in pairs)
        row["interleaved_decode_tok_s"] = statistics.median(b for _, b in pairs)
        row["interleaved_decode_vs_plain"] = statistics.median(b / a for a, b in pairs)
        del plain
    if kind == "plain":
        row["threads"] = obj.n_threads if hasattr(obj, "n_threads") else threads
    else:
        row.update(group_turns(obj, rounds, mode))
        rr = group_turns(obj, rounds, "round-robin")  # three speakers every turn, no LLM director
        row.update({"rr_first_token_s": rr["first_token_s"], "rr_group_turn_s": rr["group_turn_s"],
                    "rr_speakers_per_turn": rr["speakers_per_turn"]})
        print(f"  {kind}: group turns done ({row['group_turn_s']:.1f} s)", file=sys.stderr, flush=True)
        from mascot.group.speaker import Speaker

        engine_params = Speaker(obj).params.with_(stop=())  # the speakers' sampling and budget, no early stop
        row.update(batched(obj, speaker_prompts(16, "anchor"), engine_params))
        row["threads"] = getattr(obj, "threads", None) or __import__("torch").get_num_threads()
        row["calibration_steps_per_s"] = getattr(obj, "calibration", {})
        formats = getattr(obj, "formats", None)
        if formats is not None:
            row["formats"] = {"chosen": formats.describe(), "tok_s": formats.rates, "unservable": formats.unservable}
    row["adapters"] = len(getattr(obj, "adapters", {}))
    row["weights"] = getattr(obj, "weights", "Q4_1 file" if kind == "plain" else "bf16")
    if getattr(obj, "decode_weights", row["weights"]) != row["weights"]:
        row["weights"] += f", single replies decode on {obj.decode_weights}"
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def run_child(kind: str, args: argparse.Namespace, threads: int | None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, __file__, "--only", kind, "--rounds", str(args.rounds), "--mode", args.mode, "--out", f.name]
        if threads:
            cmd += ["--threads", str(threads)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(Path(f.name).read_text())


def fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else ("–" if v is None else str(v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="measured group turns per engine")
    ap.add_argument("--mode", default="prompted", help="director mode for group turns (an LLM director)")
    ap.add_argument("--engines", default="llamacpp,plain,llamacpp-q8_0,llamacpp-native,transformers")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp decode threads (default: calibrated)")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    from mascot.files.model_files import use_cache_dir
    from mascot.settings import Settings, apply_process_defaults

    settings = Settings.from_env()  # MASCOT_LLAMACPP_* and MASCOT_CACHE_DIR, as the chat reads them
    apply_process_defaults()  # children inherit it, as chat processes set it
    use_cache_dir(settings.cache_dir)
    if args.only:
        Path(args.out).write_text(json.dumps(measure(args.only, args.rounds, args.mode, args.threads,
                                                     settings.backend_options())))
        return
    load_before = os.getloadavg()
    rows, threads = [], args.threads
    for kind in args.engines.split(","):
        row = run_child(kind, args, threads if kind != "transformers" else None)
        if kind == "llamacpp" and threads is None:
            threads = row["threads"]  # plain llama.cpp runs with the thread count the backend chose
        rows.append(row)
        print(f"{kind}: {row}", flush=True)
    plain = next((r for r in rows if r["kind"] == "plain"), None)
    cols = ["kind", "weights", "threads", "adapters", "decode_tok_s", "speaker_prompt_first_token_s", "first_token_s",
            "group_turn_s", "speakers_per_turn", "rr_first_token_s", "rr_group_turn_s", "rr_speakers_per_turn", "one_at_a_time_tok_s", "batched_tok_s", "batched_speedup",
            "same_prompt_batched_speedup", "samples8_batched_speedup", "peak_rss_mb"]
    print(f"\nload average before: {load_before}, after: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    print("| " + " | ".join(cols) + " | decode vs plain |\n|" + "---|" * (len(cols) + 1))
    for r in rows:
        ratio = r["decode_tok_s"] / plain["decode_tok_s"] if plain else None
        print("| " + " | ".join(fmt(r.get(c)) for c in cols) + f" | {fmt(ratio)} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        from mascot.backends.llamacpp.calibrate import machine

        Path(args.json).write_text(json.dumps({"machine": machine(), "load_before": load_before,
                                               "load_after": os.getloadavg(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
