"""GRPO completions sampled on llama.cpp with the policy's current LoRA (mascot/train/grpo_rollout.py).

On the embedded SmolLM2-135M: the rollout returns one completion per prompt entry with the tokenizer's prompt
tokens, greedy llama.cpp continuations through the exported LoRA match transformers + PEFT token for token, each
optimizer step loads the new adapter and drops the old one, and two real GRPO steps train with it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.model  # the embedded SmolLM2-135M on transformers and llama.cpp


def _prompts() -> list[list[dict[str, str]]]:
    from mascot.data import load_scenarios
    from mascot.group.personas import load_pack
    from mascot.group.prompts import speaker_messages
    from mascot.train.stage1.data import default_directive

    pack = load_pack("emotional-support")
    anchor = pack.get("Anchor")
    scenarios = load_scenarios("bundled:ed", split="train")[:2]
    return [speaker_messages(anchor, pack.active, s.to_dialogue(), default_directive(anchor)) for s in scenarios]


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any]:
    """The embedded model with a LoRA whose B matrices are non-zero (a fresh LoRA would change nothing)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from mascot.files.model_files import resolve_model
    from mascot.train.modeling import load_tokenizer, num_layers
    from mascot.train.recipes import load_recipe
    from mascot.train.trl_configs import lora_config

    torch.manual_seed(0)
    cfg = load_recipe("tiny-cpu", {})
    base = AutoModelForCausalLM.from_pretrained(resolve_model("embedded"), dtype=torch.float32, local_files_only=True)
    model = get_peft_model(base, lora_config(cfg, num_layers(base)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    model.eval()
    return model, load_tokenizer("embedded", padding_side="left")


def _trainer(model: Any, step: int) -> SimpleNamespace:
    return SimpleNamespace(state=SimpleNamespace(global_step=step), model=model,
                           accelerator=SimpleNamespace(unwrap_model=lambda m: m))


def _rollout(tok: Any, **kw: Any):
    from mascot.train.stage1.grpo_rollout import LlamaCppRollout

    params = dict(max_new_tokens=12, temperature=0.7, top_p=0.95, top_k=0, repetition_penalty=1.1, seed=3)
    params.update(kw)
    return LlamaCppRollout("embedded", tok, **params)


def test_one_completion_per_prompt_entry_with_the_tokenizers_prompt(policy) -> None:
    model, tok = policy
    prompts = _prompts()
    entries = [prompts[0]] * 2 + [prompts[1]] * 2  # as TRL passes them: each prompt num_generations times
    rollout = _rollout(tok)
    try:
        out = rollout(entries, _trainer(model, 0))
    finally:
        rollout.close()
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs"} and out["logprobs"] is None
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == 4
    for messages, ids in zip(entries, out["prompt_ids"]):
        want = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        want = list(want["input_ids"]) if hasattr(want, "keys") else list(want)
        assert ids == want
    for ids in out["completion_ids"]:
        assert 1 <= len(ids) <= 13  # the budget, plus the end-of-turn token when the model stops itself
        assert ids[-1] == tok.eos_token_id or len(ids) == 12


def test_greedy_tokens_match_transformers_with_the_same_lora(policy) -> None:
    """The exported adapter is the policy: llama.cpp (f32) and transformers + PEFT agree token for token."""
    import torch

    model, tok = policy
    prompt = _prompts()[0]
    rollout = _rollout(tok, temperature=0.0, repetition_penalty=1.0, max_new_tokens=16)
    try:
        ours = rollout([prompt], _trainer(model, 0))["completion_ids"][0]
    finally:
        rollout.close()
    prompt_ids = list(tok.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=False))
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                             pad_token_id=tok.pad_token_id)
    theirs = gen[0, len(prompt_ids):].tolist()
    theirs = theirs[: theirs.index(tok.eos_token_id) + 1] if tok.eos_token_id in theirs else theirs
    assert ours == theirs


def test_each_step_loads_the_new_adapter_and_drops_the_old(policy) -> None:
    model, tok = policy
    prompt = _prompts()[0]
    rollout = _rollout(tok)
    try:
        rollout([prompt, prompt], _trainer(model, 0))
        assert rollout.adapter == "policy-0" and set(rollout.backend._lora) == {"policy-0"}
        rollout([prompt, prompt], _trainer(model, 0))  # the same step (gradient accumulation): no reload
        assert set(rollout.backend._lora) == {"policy-0"}
        rollout([prompt, prompt], _trainer(model, 1))
        assert rollout.adapter == "policy-1" and set(rollout.backend._lora) == {"policy-1"}
        assert all(key != "policy-0" for key, _ in rollout.backend._slots)
        assert "policy-0" not in rollout.backend._parked  # no prefix computed through the old weights is kept
    finally:
        rollout.close()
    assert not rollout.backend._lora


@pytest.mark.train
def test_two_grpo_steps_train_on_llamacpp_rollouts(tmp_path, monkeypatch) -> None:
    """A real GRPOTrainer run of 2 steps with the rollout: the LoRA changes and the logs show the completions."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # as `mascot train` sets it for llama.cpp rollouts
    from datasets import Dataset
    from trl import GRPOTrainer

    from mascot.files.model_files import resolve_model
    from mascot.train.modeling import load_tokenizer, lora_state, num_layers
    from mascot.train.recipes import load_recipe
    from mascot.train.stage1.grpo_rollout import make_rollout
    from mascot.train.trl_configs import build_grpo_config, lora_config

    cfg = load_recipe("tiny-cpu", {"grpo_rollouts": "llamacpp", "max_steps": "2", "max_new_tokens": "10",
                                   "grpo.per_device_train_batch_size": "2", "grpo.num_generations": "2",
                                   "grpo.max_completion_length": "10"})
    tok = load_tokenizer("embedded", padding_side="left")
    args = build_grpo_config(cfg, tmp_path, max_steps=2, model_is_path=True)
    args.reward_weights = [1.0]  # one toy reward below instead of the recipe's seven

    def length_reward(completions: list[Any], **_: Any) -> list[float]:
        return [float(len(c[0]["content"] if isinstance(c, list) else c)) for c in completions]

    rollout = make_rollout(cfg, tok, args)
    model = resolve_model("embedded")
    trainer = GRPOTrainer(model=model, reward_funcs=[length_reward], args=args, processing_class=tok,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in _prompts()]),
                          peft_config=lora_config(cfg, num_layers(model)), rollout_func=rollout)
    before = lora_state(trainer.model)
    try:
        trainer.train()
    finally:
        rollout.close()
    after = lora_state(trainer.model)
    assert trainer.state.global_step == 2 and rollout.synced_step == 1
    assert any(not before[n].equal(after[n]) for n in before)
    logged = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    assert logged and all(0 < h["completions/mean_length"] <= 11 for h in logged)
