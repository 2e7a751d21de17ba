"""Stage 1 end to end on the machine at hand (a CUDA GPU when there is one): the `tiny-cpu` recipe's model and
prompts with the device's trainer settings, through the same command a researcher types, then the trained adapter
loaded into the chat's transformers backend to answer one message.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/stage1_device.py --json benchmarks/results/stage1_device.json

On a GPU it sets bf16 weights and trainer (`train_dtype bfloat16`, `grpo.bf16 true`, `grpo.use_cpu false`) and
candidates on the transformers backend; on a CPU the recipe's fp32. The rewards are the ones that need no bundled
encoder (format, mood, overlong), so the check needs only the generator's weights. Reports the device, the
candidates' and GRPO's time, seconds per GRPO step, the reward curve's first and last steps, peak GPU memory, and
the reply the trained adapter gives.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def device_info() -> dict:
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        return {"device": "cuda", "name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
                "torch": torch.__version__, "cuda": torch.version.cuda}
    return {"device": "cpu", "name": platform.processor() or platform.machine(), "torch": torch.__version__}


def stage1_command(out: Path, persona: str, steps: int, contexts: int, gpu: bool) -> list[str]:
    cmd = [sys.executable, "-m", "mascot", "train", "stage1", "--recipe", "tiny-cpu", "--output", str(out),
           "--only", f"generate,grpo:{persona}", "--max-steps", str(steps), "--no-bars",
           "--max_contexts", str(contexts), "--k", "2", "--grpo_workers", "1", "--sft_warm_start", "false",
           "--rewards", "format,mood,overlong", "--reward_weights", "2,1,2", "--persona_overrides", "{}",
           "--rm_length_control", "false", "--judge_length_control", "false"]
    if gpu:
        cmd += ["--backend", "transformers", "--train_dtype", "bfloat16", "--grpo.bf16", "true",
                "--grpo.use_cpu", "false", "--grpo.num_generations", "8", "--grpo.per_device_train_batch_size", "32",
                "--torch_threads", "8"]
    return cmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--persona", default="anchor", help="persona key to train")
    ap.add_argument("--steps", type=int, default=20, help="GRPO optimizer steps")
    ap.add_argument("--contexts", type=int, default=24, help="training openings (first N)")
    ap.add_argument("--output", default=None, help="run folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    import torch

    info = device_info()
    gpu = info["device"] == "cuda"
    out = Path(args.output or tempfile.mkdtemp(prefix="stage1-device-"))
    cmd = stage1_command(out, args.persona, args.steps, args.contexts, gpu)
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    manifest = json.loads((out / "manifest.json").read_text())["steps"]
    grpo = manifest[f"grpo:{args.persona}"]["metrics"]
    curve = grpo.get("curve") or []
    adapter = out / "speakers" / args.persona

    from mascot.backends.base import GenerationParams
    from mascot.backends.transformers_backend import TransformersBackend
    from mascot.group.dialogue import USER, Dialogue, Turn
    from mascot.group.personas import load_pack
    from mascot.group.prompts import speaker_messages

    pack = load_pack("emotional-support")
    persona = pack.get(args.persona)
    backend = TransformersBackend(dtype="bfloat16" if gpu else "auto")
    backend.add_adapter(args.persona, str(adapter))
    d = Dialogue([Turn(USER, "I finally finished the first draft of my thesis after two years.")])
    t1 = time.perf_counter()
    reply = backend.generate([speaker_messages(persona, pack.active, d, None)],
                             GenerationParams(max_new_tokens=48, temperature=0.6, seed=0), adapter=args.persona)[0].text
    result = {
        **info, "command": " ".join(cmd[1:]), "wall_s": round(wall, 1),
        "generate_s": manifest["generate"]["metrics"].get("seconds"),
        "candidates": manifest["generate"]["metrics"].get("candidates"),
        "grpo_steps": grpo.get("steps"), "grpo_s": grpo.get("grpo_seconds"), "s_per_step": grpo.get("seconds_per_step"),
        "reward_first": curve[0].get("reward") if curve else None, "reward_last": curve[-1].get("reward") if curve else None,
        "peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if gpu else None,
        "adapter_files": sorted(p.name for p in adapter.iterdir()),
        "reply_s": round(time.perf_counter() - t1, 2), "reply": reply,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
