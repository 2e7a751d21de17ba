"""A real Stage-2 run on a tiny random Llama: states from simulated conversations, a format warm start and
2 GRPO steps on the director (TRL GRPOTrainer + LoRA) with rollouts through GroupChat on the fake-judged
group reward; the adapter then loads in the chat's `trained` mode and yields valid directives; a second
invocation skips the finished steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.model, pytest.mark.train]  # the embedded tokenizer; warm-start and GRPO steps


def test_stage2_end_to_end_on_a_tiny_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    from mascot.backends.transformers_backend import TransformersBackend
    from mascot.group.chat import GroupChat
    from mascot.group.dialogue import Dialogue
    from mascot.group.director import DIRECTOR_ADAPTER
    from mascot.train.progress import read_progress
    from mascot.train.recipes import load_recipe
    from mascot.train.stage2.pipeline import main

    out = tmp_path / "run"
    cfg = load_recipe("tiny-cpu", stage="stage2", overrides={
        "model": str(tiny_model_dir), "dtype": "float32", "output_dir": str(out), "run": "smoke", "max_scripts": "2",
        "max_states": "2", "max_steps": "2", "warm_start_epochs": "1", "rollout_max_new_tokens": "8",
        "grpo.max_completion_length": "8", "grpo.save_steps": "1", "lora_layers": "null",
    })
    card = main(cfg, show_bars=False)
    adapter = out / "director"
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    grpo = card["grpo"]
    # a random 2-layer model rarely names a valid speaker, so GRPO's advantages may all be 0 here; the
    # warm start always moves the adapter (LoRA B starts at zero)
    assert grpo["steps"] == 2 and grpo["warm_start"]["steps"] >= 1 and grpo["trained_lora_b"] > 0
    assert grpo["reward_funcs"] == ["group_reward", "format_reward"]
    assert (out / "stage2" / "run_card.json").exists() and (out / "stage2" / "README.md").exists()
    events = read_progress(out / "stage2" / "progress.jsonl")
    assert any(e["step"] == "grpo:director" and e["status"] == "metrics" for e in events)
    assert list((out / "stage2" / "work" / "grpo").glob("checkpoint-*"))  # resumable

    # the adapter loads in the chat's trained mode and gives valid directives (constrained choice)
    backend = TransformersBackend(str(tiny_model_dir), dtype="float32")
    backend.add_adapter(DIRECTOR_ADAPTER, str(adapter))
    chat = GroupChat(backend, cfg_roster(cfg), mode="trained", speaker_params=None)
    chat.speaker.params = chat.speaker.params.with_(max_new_tokens=4)
    turns = chat.run(Dialogue(), "I failed my driving test again.")
    assert chat.director.mode == "trained" and len({t.speaker for t in turns}) >= 2
    assert all(t.meta["source"] == "trained" for t in turns)

    again = main(cfg, show_bars=False)  # finished steps are skipped
    assert again["grpo"]["steps"] == 2
    skipped = [e for e in read_progress(out / "stage2" / "progress.jsonl") if e["status"] == "skipped"]
    assert {e["step"] for e in skipped} == {"states", "grpo"}
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)


def cfg_roster(cfg):
    from mascot.group.personas import load_pack

    return load_pack(cfg.pack).active
