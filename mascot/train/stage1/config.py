"""Stage-1 configuration: the typed `Stage1Config`, every knob of the persona-alignment pipeline.

A recipe (loaded by `mascot.train.recipes.load_recipe`, which imports this module; never the other way) has
top-level pipeline fields (data, model, generation, judge, pairs, LoRA, rewards) and three sections passed
straight to TRL: `reward_model:` (any `trl.RewardConfig` field), `grpo:` (any `trl.GRPOConfig` field) and
`sft:` (any `trl.SFTConfig` field, for the optional warm start). The TRL and PEFT objects are built from this
config when a trainer runs (`mascot.train.trl_configs`).

    cfg = load_recipe("tiny-cpu", overrides={"max_contexts": "12", "grpo.learning_rate": "1e-4"})
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError, unknown_name
from mascot.train.trl_configs import check_section

STEPS = ("generate", "judge", "pairs", "reward_model", "grpo")
ADAPTER_MODES = ("per-persona", "shared")
RM_KINDS = ("llm", "embedding")
ROLLOUT_KINDS = ("trainer", "llamacpp")  # grpo_rollouts (mascot/train/stage1/grpo_rollout.py)
RM_REWARD_NORMS = ("group", "global")
CONTEXT_MODES = ("round", "opening")
# what `persona_overrides` may set for one persona's warm start and GRPO run
PERSONA_FIELDS = ("rewards", "reward_weights", "sft_rank_weights", "sft_max_words", "sft_criterion", "grpo")
# override fields that hold a trainer section: a persona's entry updates the recipe's section, key by key
_MERGED_PERSONA_FIELDS = ("grpo",)


@dataclass
class Stage1Config:
    """Every knob of the Stage-1 pipeline. Field docs double as `--help` text."""

    # ---------------------------------------------------------------- run and outputs
    run: str = field(default="tiny-cpu", metadata={"help": "Run name; outputs go to <checkpoints_dir>/<run>/."})
    output_dir: str | None = field(default=None, metadata={"help": "Output folder (default <checkpoints_dir>/<run>)."})
    checkpoints_dir: str = field(default="checkpoints", metadata={"help": "Root of all runs (what the chat loads)."})
    seed: int = field(default=42, metadata={"help": "Seed for sampling, splits and trainers."})
    description: str = field(default="", metadata={"help": "One line shown in the run card and the admin tab."})
    max_steps: int | None = field(default=None, metadata={"help": "Cap on optimizer steps of each trainer (RM and every GRPO adapter)."})
    torch_threads: int | None = field(
        default=None,
        metadata={"help": "torch.set_num_threads for CPU runs (None = torch's default). On a shared, busy machine 1 "
                  "thread avoids oversubscription and was 3-4x faster than 2 here."},
    )

    # ---------------------------------------------------------------- data
    pack: str = field(default="emotional-support", metadata={"help": "Persona pack name or YAML path."})
    personas: list[str] | None = field(default=None, metadata={"help": "Personas to train (default: the pack's active ones)."})
    scenarios: str = field(default="emotional-support", metadata={"help": "Scenario set for mascot.data.load_scenarios."})
    train_split: str = field(default="train", metadata={"help": "Scenario split used for training contexts."})
    max_contexts: int | None = field(default=None, metadata={"help": "Cap on training contexts (None = all)."})
    context_mode: str = field(
        default="round",
        metadata={"help": "round: later personas see earlier personas' first candidate (like a chat round); "
                  "opening: every persona answers the user's opening alone."},
    )
    extra_pairs: list[str] = field(default_factory=list, metadata={"help": "JSONL files of {prompt, chosen, rejected} pairs (annotation export)."})

    # ---------------------------------------------------------------- model and backend
    model: str = field(default="embedded", metadata={"help": "Base model: 'embedded' or a local path (never downloaded)."})
    dtype: str = field(default="auto", metadata={"help": "Generation dtype for the backend (auto, bfloat16, float32)."})
    train_dtype: str = field(default="float32", metadata={"help": "dtype the trainers load the base model in."})
    backend: str = field(default="transformers", metadata={"help": "Generation backend for candidates: transformers | llamacpp | vllm | auto "
                                                                       "(llama.cpp on CPU for a GGUF model). The trainers always use transformers."})

    # ---------------------------------------------------------------- step 1: candidates
    k: int = field(default=4, metadata={"help": "Candidates per (context, persona)."})
    gen_batch_size: int = field(default=16, metadata={"help": "Prompts per backend.generate call."})
    max_new_tokens: int = field(default=64, metadata={"help": "Tokens per candidate."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature for candidates."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling for candidates."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Repetition penalty for candidates."})

    # ---------------------------------------------------------------- step 2: judge
    judge: str = field(default="offline", metadata={"help": "Judge name for mascot.judges.load_judge (offline | llm)."})
    judge_kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "Extra keyword arguments for the judge."})
    judge_batch_size: int = field(default=64, metadata={"help": "Items per Judge.score_batch call."})

    # ---------------------------------------------------------------- step 3: pairs
    delta: float = field(default=0.5, metadata={"help": "Minimum aggregate-score gap for a preference pair."})
    max_pairs_per_group: int | None = field(default=None, metadata={"help": "Cap on pairs per group (None = all qualifying)."})
    rm_eval_fraction: float = field(default=0.15, metadata={"help": "Share of contexts held out to measure RM pair accuracy."})
    pair_criteria: list[str] = field(
        default_factory=list,
        metadata={"help": "Judge criteria a chosen reply must not score lower on than the rejected one (e.g. [consistency])."},
    )
    pair_min_acceptability: float | None = field(
        default=None, metadata={"help": "Drop judge pairs whose chosen reply the acceptability scorer rates below this "
                                        "(0-1; None = keep; see docs/acceptability.md)."}
    )
    pair_max_length_ratio: float | None = field(
        default=None, metadata={"help": "Drop judge pairs whose chosen reply is more than this many times longer (None = keep)."}
    )
    cross_persona_pairs: int = field(
        default=0,
        metadata={"help": "Cross-persona negatives: per group, this many of the persona's best replies are paired "
                  "against each other persona's length-matched reply to the same scenario (0 = off)."},
    )

    # ---------------------------------------------------------------- LoRA (speakers and reward model)
    lora_r: int = field(default=16, metadata={"help": "LoRA rank of the speaker adapters."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha of the speaker adapters."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], metadata={"help": "Modules LoRA wraps."}
    )
    lora_layers: int | None = field(
        default=None,
        metadata={"help": "Put LoRA on the last N transformer layers only (None = all). Backward then stops at "
                  "those layers, which roughly halves CPU step time; the paper recipe uses all layers."},
    )
    cross_persona_rejected: int = field(
        default=1, metadata={"help": "Cross-persona negatives: replies of each other persona per chosen reply (closest in length first)."}
    )
    cross_persona_margin: float | None = field(
        default=None,
        metadata={"help": "Keep a cross-persona pair only if the judge rates the chosen reply more consistent with the "
                  "persona than the rejected one (judged as that persona) by at least this much (None = keep all)."},
    )
    rm_kind: str = field(
        default="llm",
        metadata={"help": "Reward model kind: llm (sequence-classification LoRA on the base model, the paper's) or "
                  "embedding (a Bradley-Terry MLP head on the bundled all-MiniLM-L6-v2 embeddings; trains in seconds)."},
    )
    rm_head_lrs: list[float] = field(default_factory=lambda: [1e-3, 3e-3], metadata={"help": "Embedding RM: learning rates swept."})
    rm_head_weight_decays: list[float] = field(default_factory=lambda: [1e-2, 1e-1], metadata={"help": "Embedding RM: weight decays swept."})
    rm_head_epochs: int = field(default=60, metadata={"help": "Embedding RM: epochs over the training pairs."})
    rm_head_hidden: int = field(default=64, metadata={"help": "Embedding RM: hidden units of the MLP head."})
    rm_lora_r: int | None = field(default=None, metadata={"help": "LoRA rank of the reward model (default lora_r)."})
    rm_lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha of the reward model (default lora_alpha)."})

    # ---------------------------------------------------------------- step 5: GRPO
    adapter_mode: str = field(default="per-persona", metadata={"help": "per-persona: one LoRA per persona; shared: one persona-conditioned LoRA."})
    rewards: list[str] = field(default_factory=lambda: ["persona_rm", "format"], metadata={"help": "Reward functions (mascot.rewards registry)."})
    reward_weights: list[float] = field(default_factory=lambda: [1.0, 0.5], metadata={"help": "One weight per reward function."})
    format_min_words: int = field(default=15, metadata={"help": "Format reward: fewest words in a reply."})
    format_max_words: int = field(default=150, metadata={"help": "Format reward: most words in a reply."})
    format_graded: bool = field(
        default=False,
        metadata={"help": "Format reward: graded by length (1 inside the word band, less outside; 0 if cut off or "
                  "malformed) instead of the paper's binary 1/0."},
    )
    overlong_buffer: int = field(
        default=12,
        metadata={"help": "The 'overlong' reward (DAPO's soft overlong punishment): 0 up to grpo.max_completion_length "
                  "minus this many tokens, then linearly down to -1 at the budget."},
    )
    score_max_words: int | None = field(
        default=None,
        metadata={"help": "Length-capped rewards: persona_rm, the judge rewards and mood read only a reply's first this "
                  "many words (cut back to a sentence end), so words past the format band earn nothing (null: all)."},
    )
    judge_length_control: bool = field(
        default=False,
        metadata={"help": "Length-controlled judge rewards (judge, relevance, consistency): take off the judge points "
                  "one more word earns, per persona, measured on the judged candidates (a within-context slope)."},
    )
    rm_length_control: bool = field(
        default=False,
        metadata={"help": "Length-controlled persona_rm: take off the RM points one more word earns, per persona, measured "
                  "by scoring the judged candidates with the trained RM (a within-context slope)."},
    )
    rm_reward_norm: str = field(
        default="group",
        metadata={"help": "persona_rm reward scaling: group (z-scored within each GRPO group, the paper's) or global "
                  "(standardised by the RM's training-score mean/std, so the logged reward mean can rise)."},
    )
    grpo_init_adapters: str | None = field(
        default=None,
        metadata={"help": "Start GRPO from saved adapters (<dir>/<persona key>/, e.g. a run's sft/ folder) instead of a "
                  "warm start or a fresh LoRA: how the GRPO lr/beta sweep reuses one warm start."},
    )
    sft_save: bool = field(
        default=True, metadata={"help": "Save each warm-start adapter to <output>/sft/<persona>/ (the SFT-only ablation)."}
    )
    grpo_max_prompts: int | None = field(default=None, metadata={"help": "Cap on GRPO prompts per persona (None = all train contexts)."})
    grpo_rollouts: str = field(
        default="trainer",
        metadata={"help": "Who samples GRPO's completions: trainer (TRL: transformers.generate, or vLLM with "
                  "grpo.use_vllm) or llamacpp (the policy's LoRA loaded into llama.cpp every step; about 4x faster "
                  "sampling on CPU, mascot/train/stage1/grpo_rollout.py)."},
    )
    grpo_workers: int = field(
        default=1,
        metadata={"help": "Train this many per-persona adapters at once, one process each (`--only grpo:<key>`). On a "
                  "2-core CPU with 1 torch thread per process, 2-3 workers use the cores that one thread leaves idle."},
    )
    rm_batch_size: int = field(default=16, metadata={"help": "Batch size when the reward model scores completions."})
    sft_warm_start: bool = field(
        default=False,
        metadata={"help": "Before GRPO, fine-tune each adapter on its persona's best-judged candidate per context "
                  "(rejection-sampling SFT; the paper's pi_SFT stage, §7.3, with judged candidates as the targets)."},
    )
    sft_max_examples: int | None = field(
        default=None, metadata={"help": "Warm start: keep only this many best-scored targets per persona (None = all)."}
    )
    sft_min_score: float = field(default=0.0, metadata={"help": "Warm start: only targets whose ranking score is at least this."})
    sft_trim: bool = field(
        default=False,
        metadata={"help": "Warm start: cut targets that stop mid-sentence back to their last finished sentence."},
    )
    sft_criterion: str | None = field(
        default=None,
        metadata={"help": "Warm start: rank candidates by this judge criterion (e.g. consistency, ties broken by the "
                  "aggregate) instead of by the aggregate."},
    )

    sft_max_words: int | None = field(
        default=None,
        metadata={"help": "Warm start: the best-ranked target among candidates of at most this many words (after "
                  "trimming), when a context has one; keeps the learned length clear of the GRPO token budget."},
    )
    sft_rank_weights: dict[str, float] | None = field(
        default=None,
        metadata={"help": "Warm start: rank candidates by this weighted mean of judge criteria (e.g. {relevance: 2, "
                  "consistency: 1.5, emotion: 1, empathy: 1, contribution: 1}) instead of the plain aggregate."},
    )

    persona_overrides: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={"help": "Per-persona settings ({persona key: {field: value}}, fields: "
                  + ", ".join(PERSONA_FIELDS) + ") for that persona's warm start and GRPO (per-persona mode), e.g. "
                  "{beacon: {sft_rank_weights: {relevance: 4, ...}}}: each persona's training aims at its own measured gap."},
    )

    # ---------------------------------------------------------------- TRL sections
    reward_model: dict[str, Any] = field(default_factory=dict, metadata={"help": "trl.RewardConfig fields."})
    grpo: dict[str, Any] = field(default_factory=dict, metadata={"help": "trl.GRPOConfig fields."})
    sft: dict[str, Any] = field(default_factory=dict, metadata={"help": "trl.SFTConfig fields (warm start)."})

    # filled by load_recipe
    recipe: str = field(default="", metadata={"help": "Where the recipe came from (set automatically)."})

    def __post_init__(self) -> None:
        if self.context_mode not in CONTEXT_MODES:
            raise unknown_name("context_mode", self.context_mode, CONTEXT_MODES)
        if self.adapter_mode not in ADAPTER_MODES:
            raise unknown_name("adapter_mode", self.adapter_mode, ADAPTER_MODES)
        if self.grpo_rollouts not in ROLLOUT_KINDS:
            raise unknown_name("grpo_rollouts", self.grpo_rollouts, ROLLOUT_KINDS)
        if self.grpo_rollouts == "llamacpp" and self.grpo.get("use_vllm"):
            raise ConfigError("grpo_rollouts: llamacpp and grpo.use_vllm both generate GRPO's completions: choose one.")
        if self.rm_kind not in RM_KINDS:
            raise unknown_name("rm_kind", self.rm_kind, RM_KINDS)
        if self.rm_reward_norm not in RM_REWARD_NORMS:
            raise unknown_name("rm_reward_norm", self.rm_reward_norm, RM_REWARD_NORMS)
        if self.cross_persona_pairs < 0:
            raise ConfigError(f"cross_persona_pairs={self.cross_persona_pairs} must be >= 0 (0 switches them off).")
        if self.k < 2:
            raise ConfigError(f"k={self.k}: at least 2 candidates per context are needed to form preference pairs.")
        if self.delta < 0:
            raise ConfigError(f"delta={self.delta} must be >= 0 (the paper uses 0.5).")
        from mascot.rewards import check_reward_names

        check_reward_names(self.rewards)  # here, not minutes later in a GRPO worker after its warm start
        if len(self.rewards) != len(self.reward_weights):
            raise ConfigError(
                f"rewards has {len(self.rewards)} entries but reward_weights has {len(self.reward_weights)}: give one weight per reward."
            )
        for key, fields in self.persona_overrides.items():
            if not isinstance(fields, dict):
                raise ConfigError(f"persona_overrides[{key!r}] = {fields!r}: give a mapping of fields "
                                  f"({', '.join(PERSONA_FIELDS)}) to values.")
            bad = sorted(set(fields) - set(PERSONA_FIELDS))
            if bad:
                raise ConfigError(f"persona_overrides[{key!r}] sets {', '.join(bad)}; fields a persona may set: "
                                  f"{', '.join(PERSONA_FIELDS)}.")
            if "reward_weights" in fields:
                try:
                    fields["reward_weights"] = [float(w) for w in fields["reward_weights"]]
                except (TypeError, ValueError):
                    raise ConfigError(f"persona_overrides[{key!r}].reward_weights = {fields['reward_weights']!r}: give a "
                                      "list of numbers, one per reward.") from None
            try:
                self.for_persona(key)  # the persona's whole config passes the same checks
            except ConfigError as exc:
                raise ConfigError(f"persona_overrides[{key!r}]: {exc}") from None
        if self.persona_overrides and self.adapter_mode != "per-persona":
            raise ConfigError("persona_overrides needs adapter_mode: per-persona (a shared adapter trains all personas at once).")
        if not 0 <= self.rm_eval_fraction < 1:
            raise ConfigError(f"rm_eval_fraction={self.rm_eval_fraction} must be in [0, 1).")
        if self.sft_max_words is not None and self.sft_max_words < 1:
            raise ConfigError(f"sft_max_words={self.sft_max_words} must be >= 1 (or null for no limit).")
        if self.sft_rank_weights is not None and any(w < 0 for w in self.sft_rank_weights.values()):
            raise ConfigError(f"sft_rank_weights={self.sft_rank_weights}: weights must be >= 0.")
        if self.score_max_words is not None and self.score_max_words < 1:
            raise ConfigError(f"score_max_words={self.score_max_words} must be >= 1 (or null to read whole replies).")
        if self.overlong_buffer < 1:
            raise ConfigError(f"overlong_buffer={self.overlong_buffer} must be >= 1 token.")
        if self.format_min_words > self.format_max_words:
            raise ConfigError("format_min_words must not exceed format_max_words.")
        for section in ("reward_model", "grpo", "sft"):
            check_section(section, getattr(self, section))

    # -------------------------------------------------------------- derived
    def for_persona(self, key: str | None) -> Stage1Config:
        """This config as persona `key`'s adapter job sees it: its `persona_overrides` entry applied."""
        fields = self.persona_overrides.get(key or "")
        if not fields:
            return self
        fields = {k: {**getattr(self, k), **v} if k in _MERGED_PERSONA_FIELDS and isinstance(v, dict) else v
                  for k, v in fields.items()}
        return dataclasses.replace(self, **fields, persona_overrides={})

    def all_rewards(self) -> list[str]:
        """Every reward any persona's GRPO job uses (the recipe's list, then those only a persona override adds), so the
        parent loads the reward model and the judge once for all of them."""
        names = list(self.rewards)
        for fields in self.persona_overrides.values():
            names += [r for r in fields.get("rewards", []) if r not in names]
        return names

    @property
    def out(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path(self.checkpoints_dir) / self.run

    def grpo_defaults(self) -> dict[str, Any]:
        """GRPOConfig fields the recipe's `grpo:` section may change: K completions of the candidates' length."""
        return {"num_generations": self.k, "max_completion_length": self.max_new_tokens}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """A short hash of the whole config (shown in the run card)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]

