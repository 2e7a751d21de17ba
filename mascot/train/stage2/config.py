"""Stage-2 (director) configuration: the typed `Stage2Config`, every knob of the director pipeline.

Recipes live in `mascot/recipes/stage2/<name>.yaml` (or any YAML path) and load with
`mascot.train.recipes.load_recipe(name, overrides, stage="stage2")`. Top-level fields are the pipeline's; the
`grpo:` section takes any `trl.GRPOConfig` field. The TRL and PEFT objects are built from this config when a
trainer runs (`mascot.train.trl_configs`).

    cfg = load_recipe("tiny-cpu", {"max_states": "8"}, stage="stage2")
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

STAGE2_STEPS = ("states", "grpo")


@dataclass
class Stage2Config:
    """Every knob of the Stage-2 (director GRPO) pipeline."""

    # run and outputs
    run: str = field(default="tiny-cpu", metadata={"help": "Run name; the adapter goes to <checkpoints_dir>/<run>/director/."})
    checkpoints_dir: str = field(default="checkpoints", metadata={"help": "Root of all runs."})
    output_dir: str | None = field(default=None, metadata={"help": "Run folder (default <checkpoints_dir>/<run>)."})
    seed: int = field(default=7, metadata={"help": "Seed for states, rollouts and the trainer."})
    description: str = field(default="", metadata={"help": "One line for the run card."})
    max_steps: int | None = field(default=None, metadata={"help": "Cap on GRPO optimizer steps."})
    torch_threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (1 on a shared CPU)."})

    # data: dialogue states from simulated conversations
    pack: str = field(default="emotional-support", metadata={"help": "Persona pack name or YAML path."})
    scripts: str = field(default="bundled", metadata={"help": "Seeker scripts: bundled | esconv[:PATH]."})
    train_split: str = field(default="train", metadata={"help": "Script split for training states."})
    max_scripts: int | None = field(default=None, metadata={"help": "Cap on scripts simulated for states."})
    state_user_turns: int = field(default=2, metadata={"help": "User messages per simulated conversation when sampling states."})
    state_director: str = field(default="random", metadata={"help": "Director used to simulate the conversations states are cut from."})
    max_states: int | None = field(default=None, metadata={"help": "Dialogue states kept (sampled over positions)."})

    # model
    model: str = field(default="embedded", metadata={"help": "Base model of the director (and the frozen speakers)."})
    dtype: str = field(default="auto", metadata={"help": "Rollout backend dtype."})
    train_dtype: str = field(default="float32", metadata={"help": "dtype the trainer loads the director's base in."})
    rollout_backend: str = field(default="auto", metadata={"help": "Backend for frozen speakers / simulated user (auto: llamacpp on CPU for a GGUF model | transformers | llamacpp | vllm | openai)."})
    speakers_run: str | None = field(default=None, metadata={"help": "Run whose Stage-1 speaker adapters are frozen in rollouts (default: this run)."})

    # rollouts and reward
    block_turns: int = field(default=4, metadata={"help": "N: turns rolled forward and judged per directive (the directive's turn included)."})
    rollout_director: str = field(default="round-robin", metadata={"help": "Frozen director for the turns after the sampled directive."})
    max_speakers: int = field(default=3, metadata={"help": "Most personas per user message."})
    min_speakers: int = field(default=2, metadata={"help": "Fewest personas per user message before the director may yield."})
    simuser: str = field(default="replay", metadata={"help": "Simulated user: replay | llm."})
    simuser_profile: str | None = field(default=None, metadata={"help": "Personality profile of the llm simulated user."})
    rollout_max_new_tokens: int = field(default=48, metadata={"help": "Speaker tokens per turn in reward rollouts."})
    rollout_temperature: float = field(default=0.0, metadata={"help": "Speaker temperature in reward rollouts (0 = greedy: the reward differs only by the directive)."})
    group_judge: str = field(default="offline", metadata={"help": "Group judge: offline | llm."})
    group_judge_kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "Extra arguments for the group judge."})
    rewards: list[str] = field(default_factory=lambda: ["group", "format"], metadata={"help": "Reward functions: group, format."})
    reward_weights: list[float] = field(default_factory=lambda: [1.0, 0.5], metadata={"help": "One weight per reward."})
    repeat_penalty: float = field(default=0.1, metadata={"help": "Subtracted from the group reward when the directive picks the last speaker again (paper §7.11)."})

    # format warm start (before GRPO): a short LoRA SFT on well-formed directives naming a random allowed
    # speaker (or `none` where yielding is allowed) with that persona's default action and tone. It teaches
    # the format only; which speaker to pick, when to yield and what to ask for are left to GRPO.
    warm_start_epochs: float = field(default=0.0, metadata={"help": "Epochs of the format warm start over the states (0 = off)."})
    warm_start_lr: float = field(default=1e-3, metadata={"help": "Learning rate of the format warm start."})
    warm_start_yield_share: float = field(default=0.3, metadata={"help": "Share of warm-start targets that yield where yielding is allowed."})

    # LoRA on the director only
    lora_r: int = field(default=16, metadata={"help": "Director LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "Director LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], metadata={"help": "Modules LoRA wraps."})
    lora_layers: int | None = field(default=None, metadata={"help": "LoRA on the last N layers only (None = all)."})

    # evaluation (python -m mascot compare-directors)
    eval_split: str = field(default="test", metadata={"help": "Script split of the director comparison."})
    eval_user_turns: int = field(default=3, metadata={"help": "User messages per evaluation conversation (opening included)."})

    grpo: dict[str, Any] = field(default_factory=dict, metadata={"help": "trl.GRPOConfig fields."})
    recipe: str = field(default="", metadata={"help": "Where the recipe came from (set automatically)."})

    def __post_init__(self) -> None:
        from mascot.group.director import DIRECTOR_MODES
        from mascot.simusers import SIMUSERS

        if self.block_turns < 1:
            raise ConfigError(f"block_turns={self.block_turns} must be at least 1.")
        if len(self.rewards) != len(self.reward_weights):
            raise ConfigError(f"rewards has {len(self.rewards)} entries but reward_weights has {len(self.reward_weights)}.")
        for r in self.rewards:
            if r not in ("group", "format"):
                raise unknown_name("stage-2 reward", r, ("group", "format"))
        if self.simuser not in SIMUSERS:
            raise unknown_name("simulated-user kind", self.simuser, SIMUSERS)
        for name in ("state_director", "rollout_director"):
            if getattr(self, name) not in DIRECTOR_MODES or getattr(self, name) == "manual":
                raise ConfigError(f"{name}={getattr(self, name)!r}: use one of trained, prompted, round-robin, random.")
        if not 1 <= self.min_speakers <= self.max_speakers:
            raise ConfigError(f"min_speakers={self.min_speakers} must be between 1 and max_speakers={self.max_speakers}.")
        check_section("grpo", self.grpo)

    @property
    def out(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path(self.checkpoints_dir) / self.run

    @property
    def stage_dir(self) -> Path:
        """Stage-2 logs, run card and work files (kept apart from Stage 1's files in the same run)."""
        return self.out / "stage2"

    def grpo_defaults(self) -> dict[str, Any]:
        """GRPOConfig fields the recipe's `grpo:` section may change; checkpoints every 5 steps make a run resumable."""
        return {"num_generations": 4, "max_completion_length": 40, "save_strategy": "steps", "save_steps": 5,
                "save_total_limit": 1}

    @property
    def sft(self) -> dict[str, Any]:
        """The format warm start's `trl.SFTConfig` fields, from the `warm_start_*` fields and the `grpo:` section's
        device settings (a Stage-2 recipe has no `sft:` section)."""
        return {"learning_rate": self.warm_start_lr, "num_train_epochs": self.warm_start_epochs,
                "per_device_train_batch_size": 4, "lr_scheduler_type": "constant",
                "use_cpu": self.grpo.get("use_cpu", False), "bf16": bool(self.grpo.get("bf16", False)),
                "max_length": 1024, "dataloader_num_workers": 0}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]
