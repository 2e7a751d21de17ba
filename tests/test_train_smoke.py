"""End-to-end Stage 1 on a tiny random Llama (built offline with the embedded tokenizer): real candidate
generation, a fake judge, pairs, a real RewardTrainer run and a real GRPOTrainer run of 2 steps each.
Checks that LoRA parameters changed, that the saved adapters load back into the chat engine and
generate through GroupChat/Speaker, and that a second invocation skips the finished steps."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mascot.judges.base import CRITERIA, Judge, JudgeItem, Verdict

pytestmark = [pytest.mark.model, pytest.mark.train]  # the embedded tokenizer; RM, warm-start and GRPO steps


class FakeJudge(Judge):
    """Deterministic scores from the reply's hash (one in nine verdicts invalid), so pairs exist."""

    name = "fake"

    def __init__(self, **kwargs: object) -> None:
        pass

    def score_batch(self, items: list[JudgeItem]) -> list[Verdict]:
        out = []
        for it in items:
            h = int(hashlib.md5((it.persona.name + it.response).encode()).hexdigest(), 16)
            if h % 9 == 0:
                out.append(Verdict.invalid("fake invalid verdict"))
            else:
                out.append(Verdict({k: float(1 + (h >> (3 * i)) % 5) for i, k in enumerate(CRITERIA)}, True))
        return out


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with the embedded SmolLM2 tokenizer, saved as a local model folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from mascot.files.model_files import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("embedded"), local_files_only=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=2,
                      intermediate_size=32, vocab_size=len(tok), max_position_embeddings=2048,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_stage1_end_to_end_on_a_tiny_model(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mascot.judges as judges
    from mascot.backends.base import GenerationParams
    from mascot.backends.transformers_backend import TransformersBackend
    from mascot.data import load_scenarios
    from mascot.group.chat import GroupChat
    from mascot.group.dialogue import Dialogue
    from mascot.group.personas import load_pack
    from mascot.group.speaker import Speaker, adapter_name
    from mascot.rewards.persona_rm import PersonaRewardModel
    from mascot.train.progress import read_jsonl, read_progress
    from mascot.train.recipes import load_recipe
    from mascot.train.stage1.pipeline import main

    monkeypatch.setitem(judges.JUDGES, "fake", "tests.test_train_smoke:FakeJudge")
    out = tmp_path / "run"
    cfg = load_recipe("tiny-cpu", {
        "model": str(tiny_model_dir), "dtype": "float32", "judge": "fake", "output_dir": str(out), "run": "smoke",
        "max_contexts": "3", "k": "2", "gen_batch_size": "6", "max_new_tokens": "8", "max_steps": "2",
        "lora_r": "4", "lora_alpha": "8", "lora_layers": "none", "delta": "0.5", "rm_eval_fraction": "0",
        "max_pairs_per_group": "none", "torch_threads": "none",
        "reward_model.per_device_train_batch_size": "2", "reward_model.max_length": "1024",
        "reward_model.warmup_steps": "0", "reward_model.learning_rate": "1e-2",
        "grpo.per_device_train_batch_size": "2", "grpo.num_generations": "2", "grpo.max_completion_length": "8",
        "grpo.learning_rate": "1e-2",
        # the LLM reward model and one process (the fake judge lives in this test process only)
        "rm_kind": "llm", "grpo_workers": "1", "pair_criteria": "[]", "pair_max_length_ratio": "none",
        "cross_persona_pairs": "0", "rm_reward_norm": "group",
        # the length controls: overlong reward, length-controlled judge and reward model; the shipped recipe's
        # balanced reward reads the fake judge's Relevance and Consistency, and its relevance reward is weighted
        # per persona by the recipe's persona_overrides
        "rewards": "[persona_rm, format, judge, mood, balanced, overlong, relevance]", "reward_weights": "[1, 2, 1, 1, 2, 2, 0]",
        "overlong_buffer": "4", "judge_length_control": "true", "rm_length_control": "true",
    })
    card = main(cfg, show_bars=False)

    # every step finished and recorded
    manifest = json.loads((out / "manifest.json").read_text())["steps"]
    assert {"generate", "judge", "pairs", "reward_model", "grpo", "grpo:anchor", "grpo:catalyst", "grpo:beacon"} <= set(manifest)
    groups = read_jsonl(out / "work" / "candidates.jsonl")
    assert len(groups) == 9 and all(len(g["candidates"]) == 2 for g in groups)
    assert [g["persona"] for g in groups[::3]] == ["Anchor", "Catalyst", "Beacon"]

    # the reward model trained (LoRA + score head changed) and was saved as a PEFT folder
    rm = card["reward_model"]
    assert rm["steps"] == 2 and rm["changed_tensors"] == rm["trainable_tensors"] > 0
    assert (out / "reward_model" / "adapter_config.json").exists()
    scores = PersonaRewardModel.load(str(tiny_model_dir), out / "reward_model").score_texts(["Persona: x\n"], ["hello"])
    assert len(scores) == 1

    # each GRPO adapter trained and was saved; no optimizer state or checkpoint folders
    for key in ("anchor", "catalyst", "beacon"):
        g = card["grpo"][key]
        assert g["steps"] == 2 and g["changed_tensors"] > 0, g
        assert g["sft"]["steps"] == 2 and g["sft"]["examples"] == 3  # the warm start ran first (capped too)
        folder = out / "speakers" / key
        assert sorted(p.name for p in folder.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    assert not list(out.rglob("optimizer.pt")) and not list(out.rglob("checkpoint-*"))
    assert "rewards/persona_rm/mean" in card["grpo"]["anchor"]["summary"]
    assert "rewards/overlong_reward/mean" in card["grpo"]["anchor"]["summary"]
    slopes = json.loads((out / "work" / "rm_length_slopes.json").read_text())
    assert set(slopes) == {"Anchor", "Catalyst", "Beacon"} and all(len(v) == 2 for v in slopes.values())
    assert (out / "run_card.json").exists() and "GRPO speakers" in (out / "README.md").read_text()
    events = read_progress(out / "progress.jsonl")
    assert any(e["step"] == "grpo:anchor" and e["status"] == "metrics" for e in events)
    assert sum("judge length slopes" in e.get("message", "") for e in events) == 1

    # the adapters load back into the chat engine and generate through GroupChat / Speaker
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = TransformersBackend(model_obj=base, tokenizer=tok)
    pack = load_pack("emotional-support")
    for p in pack.active:
        backend.add_adapter(adapter_name(p), str(out / "speakers" / p.key))
    params = GenerationParams(max_new_tokens=6, temperature=0.0)
    dialogue = load_scenarios("bundled:ed", split="test")[0].to_dialogue()
    replies = Speaker(backend, params).reply_batch([(p, pack.active, dialogue, None) for p in pack.active])
    assert len(replies) == 3
    chat = GroupChat(backend, pack.active, mode="round-robin", max_speakers=3, speaker_params=params)
    turns = chat.run(Dialogue(), "I failed my driving test again.")
    assert [t.speaker for t in turns] == ["Anchor", "Catalyst", "Beacon"]
    # the adapter really is applied: logits differ from the base model's
    enc = tok(["hello there"], return_tensors="pt")
    with torch.no_grad(), backend._use_adapter(None):
        plain = backend.model(**enc).logits
    with torch.no_grad(), backend._use_adapter(adapter_name(pack.get("Anchor"))):
        tuned = backend.model(**enc).logits
    assert not torch.allclose(plain, tuned)

    # resuming: a second invocation skips every finished step
    n_before = len(read_progress(out / "progress.jsonl"))
    card_text = (out / "run_card.json").read_text()
    main(cfg, show_bars=False)
    assert (out / "run_card.json").read_text() == card_text  # nothing ran, so the card keeps its timings
    new = read_progress(out / "progress.jsonl")[n_before:]
    assert {e["step"] for e in new if e["status"] == "skipped"} >= {"generate", "judge", "pairs", "reward_model", "grpo"}
    assert not any(e["status"] == "started" and e["step"] != "run" for e in new)
