"""Stage-2 recipes: both bundled recipes load and build their TRL config; bad fields fail with the valid names."""

from __future__ import annotations

import json

import pytest

from mascot.errors import ConfigError
from mascot.train.recipes import list_recipes, load_recipe, recipe_backend
from mascot.train.trl_configs import build_grpo_config


def load_stage2_recipe(name: str, overrides: dict | None = None):
    return load_recipe(name, overrides, stage="stage2")


def test_bundled_recipes_load_and_build(tmp_path) -> None:
    assert {"tiny-cpu", "paper-gpu"} <= set(list_recipes("stage2"))
    tiny = load_stage2_recipe("tiny-cpu")
    assert tiny.rollout_backend == "auto" and tiny.rewards == ["group", "format"]  # llama.cpp on CPU
    assert tiny.stage_dir.name == "stage2" and tiny.out.name == "tiny-cpu"
    paper = load_stage2_recipe("paper-gpu")
    args = build_grpo_config(paper, tmp_path, max_steps=paper.max_steps, validate_only=True, model_is_path=True)
    assert args.num_generations == 8 and paper.block_turns == 4 and paper.grpo["use_vllm"] is True
    assert args.reward_weights == [1.0, 0.5]


def test_overrides_and_errors() -> None:
    cfg = load_stage2_recipe("tiny-cpu", {"max-states": "5", "grpo.learning_rate": "1e-4", "rollout_backend": "llamacpp"})
    assert cfg.max_states == 5 and cfg.grpo["learning_rate"] == 1e-4 and cfg.rollout_backend == "llamacpp"
    with pytest.raises(ConfigError, match="max_states"):
        load_stage2_recipe("tiny-cpu", {"max_statez": "5"})
    with pytest.raises(ConfigError, match="GRPOConfig"):
        load_stage2_recipe("tiny-cpu", {"grpo.learnin_rate": "1"})
    with pytest.raises(ConfigError, match="set by the pipeline"):
        load_stage2_recipe("tiny-cpu", {"grpo.output_dir": "x"})
    with pytest.raises(ConfigError, match="tiny-cpu"):
        load_stage2_recipe("nope")
    with pytest.raises(ConfigError, match="replay"):
        load_stage2_recipe("tiny-cpu", {"simuser": "robot"})
    with pytest.raises(ConfigError, match="min_speakers"):
        load_stage2_recipe("tiny-cpu", {"min_speakers": "4"})


def test_cli_print_config(capsys) -> None:
    from mascot.__main__ import main

    assert main(["train", "stage2", "--recipe", "tiny-cpu", "--max-steps", "3", "--block-turns", "2", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["max_steps"] == 3 and cfg["block_turns"] == 2


def test_rollout_backend_is_read_without_building_the_config():
    """The CLI reads the rollout backend before TRL and torch load, so llama.cpp can load first."""
    import sys

    assert recipe_backend("tiny-cpu", stage="stage2") in ("llamacpp", "transformers")  # auto: llamacpp on a CPU machine
    assert recipe_backend("tiny-cpu", {"rollout-backend": "transformers"}, stage="stage2") == "transformers"
    assert recipe_backend("paper-gpu", stage="stage2") == "vllm"
    if "torch" not in sys.modules:  # run alone, the peek itself must not import torch
        recipe_backend("tiny-cpu", stage="stage2")
        assert "torch" not in sys.modules


def test_rollouts_without_speaker_adapters_say_so(tmp_path, capsys) -> None:
    """A run folder without Stage-1 speakers (e.g. --output a new folder, no --speakers_run) would roll out the
    prompted base model silently: the rollout chat says so and names the fix."""
    from mascot.group.personas import load_pack
    from mascot.train.stage2.pipeline import frozen_chat

    cfg = load_stage2_recipe("tiny-cpu", {"output_dir": str(tmp_path / "new-run"), "rollout_backend": "fake"})
    frozen_chat(cfg, load_pack("emotional-support"), "round-robin")
    out = capsys.readouterr().out
    assert "no Stage-1 speaker adapters in" in out and "--speakers_run" in out
