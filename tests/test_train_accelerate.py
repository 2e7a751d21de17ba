"""Training across processes: `accelerate launch --multi_gpu --num_processes 2` on CPU (DDP over gloo) runs one
Stage-1 GRPO step and one Stage-2 step on a tiny model; only the main process writes the run's files, and the
adapters load in the chat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.train, pytest.mark.model]
ROOT = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
          "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "mascot", "train"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def test_two_processes_train_a_grpo_step_of_each_stage_and_the_adapters_load(tiny_model_dir, tmp_path, monkeypatch):
    import mascot.judges as judges
    from mascot.backends.transformers_backend import TransformersBackend
    from mascot.group.chat import GroupChat
    from mascot.group.dialogue import Dialogue
    from mascot.group.director import DIRECTOR_ADAPTER
    from mascot.group.personas import load_pack
    from mascot.group.speaker import adapter_name
    from mascot.train.progress import read_progress
    from mascot.train.recipes import load_recipe
    from mascot.train.stage1.pipeline import main as stage1

    out = tmp_path / "run"
    common = {"model": str(tiny_model_dir), "dtype": "float32", "run": "acc", "lora_r": "4", "lora_alpha": "8",
              "lora_layers": "none", "torch_threads": "none", "max_new_tokens": "8"}
    # the data steps and the reward model in one process (the fake judge lives in this test process only)
    monkeypatch.setitem(judges.JUDGES, "fake", "tests.test_train_smoke:FakeJudge")
    stage1(load_recipe("tiny-cpu", {**common, "judge": "fake", "output_dir": str(out), "max_contexts": "3", "k": "2",
                                    "gen_batch_size": "6", "max_steps": "1", "delta": "0.5", "rm_eval_fraction": "0",
                                    "max_pairs_per_group": "none", "reward_model.per_device_train_batch_size": "2",
                                    "reward_model.max_length": "1024", "rm_kind": "llm", "pair_criteria": "[]",
                                    "pair_max_length_ratio": "none", "cross_persona_pairs": "0"}),
           only=["generate", "judge", "pairs", "reward_model"], show_bars=False)
    flags = [f"--{k}={v}" for k, v in common.items()]
    grpo = _run([*LAUNCH, "stage1", "--recipe", "tiny-cpu", "--only", "grpo:anchor", "--max-steps", "1", "--output",
                 str(out), "--no-bars", *flags, "--judge=offline", "--grpo_workers=1", "--rm_kind=llm",
                 "--rm_reward_norm=group", "--persona_overrides={}", "--rewards=[persona_rm, format]",
                 "--reward_weights=[1, 1]", "--grpo.per_device_train_batch_size=2", "--grpo.num_generations=2",
                 "--grpo.max_completion_length=8"])
    assert grpo.returncode == 0, grpo.stdout[-3000:] + grpo.stderr[-3000:]
    started = [e for e in read_progress(out / "progress.jsonl") if e["step"] == "run" and e["status"] == "started"]
    assert started[-1]["metrics"]["processes"] == 2
    assert grpo.stdout.count("[stage1] run card") == 1  # one process writes and reports
    assert (out / "speakers" / "anchor" / "adapter_model.safetensors").exists()

    # Stage 2: states in one process, then one GRPO step of the director in two
    s2 = ["--max_scripts=2", "--max_states=2", "--warm_start_epochs=1", "--rollout_max_new_tokens=8",
          "--grpo.max_completion_length=8", "--lora_layers=null", f"--model={tiny_model_dir}", "--dtype=float32",
          "--run=acc"]
    states = _run([sys.executable, "-m", "mascot", "train", "stage2", "--recipe", "tiny-cpu", "--only", "states",
                   "--output", str(out), "--no-bars", "--max-steps", "1", *s2])
    assert states.returncode == 0, states.stderr[-3000:]
    refused = _run([*LAUNCH, "stage2", "--recipe", "tiny-cpu", "--only", "states", "--output", str(out), *s2])
    assert refused.returncode != 0 and "single process" in refused.stderr
    director = _run([*LAUNCH, "stage2", "--recipe", "tiny-cpu", "--only", "grpo", "--output", str(out), "--no-bars",
                     "--max-steps", "1", *s2])
    assert director.returncode == 0, director.stdout[-3000:] + director.stderr[-3000:]
    events = read_progress(out / "stage2" / "progress.jsonl")
    assert [e for e in events if e["step"] == "run" and e["status"] == "started"][-1]["metrics"]["processes"] == 2
    assert (out / "director" / "adapter_model.safetensors").exists()

    # both load in the chat
    pack = load_pack("emotional-support")
    backend = TransformersBackend(str(tiny_model_dir), dtype="float32")
    backend.add_adapter(adapter_name(pack.get("Anchor")), str(out / "speakers" / "anchor"))
    backend.add_adapter(DIRECTOR_ADAPTER, str(out / "director"))
    chat = GroupChat(backend, pack.active, mode="trained")
    chat.speaker.params = chat.speaker.params.with_(max_new_tokens=4)
    turns = chat.run(Dialogue(), "I failed my driving test again.")
    assert chat.director.mode == "trained" and turns
