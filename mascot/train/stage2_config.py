"""Stage-2 (director) configuration: the typed `Stage2Config`, its recipes and the TRL/PEFT builders.

Recipes live in `mascot/recipes/stage2/<name>.yaml` (or any YAML path). Top-level fields are the pipeline's;
the `grpo:` section takes any `trl.GRPOConfig` field. `--field value` and `--grpo.<field> value` override.

    cfg = load_stage2_recipe("tiny-cpu", {"max_states": "8"})
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from mascot.errors import ConfigError, unknown_name

STAGE2_RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes" / "stage2"
STAGE2_STEPS = ("states", "grpo")
_MANAGED = ("output_dir", "reward_weights")


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
        from mascot.director import DIRECTOR_MODES
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
        check_grpo_section(self.grpo)

    @property
    def out(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path(self.checkpoints_dir) / self.run

    @property
    def stage_dir(self) -> Path:
        """Stage-2 logs, run card and work files (kept apart from Stage 1's files in the same run)."""
        return self.out / "stage2"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _grpo_fields() -> dict[str, Any]:
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}


def check_grpo_section(values: dict[str, Any]) -> None:
    if not isinstance(values, dict):
        raise ConfigError("Recipe section 'grpo' must be a mapping of field: value.")
    valid = _grpo_fields()
    for key in values:
        if key in _MANAGED:
            raise ConfigError(f"'grpo.{key}' is set by the pipeline; use the top-level output_dir / reward_weights.")
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=5, cutoff=0.6)
            raise ConfigError(f"Unknown field 'grpo.{key}'. It must be a field of trl.GRPOConfig"
                              + (f"; similar fields: {', '.join(close)}" if close else "") + ".")


def list_stage2_recipes() -> list[str]:
    return sorted(p.stem for p in STAGE2_RECIPES_DIR.glob("*.yaml"))


def _read_stage2_yaml(name_or_path: str | Path) -> tuple[Path, dict[str, Any]]:
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        p = STAGE2_RECIPES_DIR / f"{name_or_path}.yaml"
        if not p.exists():
            raise unknown_name("stage-2 recipe", str(name_or_path), list_stage2_recipes())
    elif not p.exists():
        raise ConfigError(f"Recipe file {p} does not exist. Bundled stage-2 recipes: {', '.join(list_stage2_recipes())}.")
    from mascot.train.recipes import read_recipe_yaml

    return p, read_recipe_yaml(p)


def recipe_rollout_backend(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> str:
    """The Stage-2 recipe's rollout backend (`recipes.backend_of` its `rollout_backend` field)."""
    from mascot.train.recipes import backend_of

    return backend_of(_read_stage2_yaml(name_or_path)[1], overrides, "rollout_backend", "auto")


def load_stage2_recipe(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Stage2Config:
    """A bundled Stage-2 recipe by name or any YAML path, plus `{field or grpo.field: value}` overrides."""
    from mascot.train.recipes import coerce, normalise_key

    p, data = _read_stage2_yaml(name_or_path)
    hints = typing.get_type_hints(Stage2Config)
    top = {f.name for f in dataclasses.fields(Stage2Config) if f.name != "recipe"}
    grpo_fields = _grpo_fields()
    values: dict[str, Any] = {}

    def put(key: str, value: Any, where: str) -> None:
        if "." in key:
            section, sub = key.split(".", 1)
            if section != "grpo":
                raise ConfigError(f"{where}: dotted options go to the grpo section (--grpo.<field>), got {key!r}.")
            check_grpo_section({sub: value})
            values.setdefault("grpo", {})[sub] = coerce(value, grpo_fields[sub].type, key)
        elif key == "grpo":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: section 'grpo' must be a mapping.")
            for k, v in value.items():
                put(f"grpo.{k}", v, where)
        elif key in top:
            values[key] = coerce(value, hints[key], key)
        else:
            close = difflib.get_close_matches(key, sorted(top), n=3, cutoff=0.6)
            raise ConfigError(f"{where}: unknown field {key!r}." + (f" Did you mean {', '.join(close)}?" if close else "")
                              + f" Valid fields: {', '.join(sorted(top))}.")

    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a recipe must be a YAML mapping.")
    for k, v in data.items():
        put(k, v, str(p))
    for k, v in (overrides or {}).items():
        put(normalise_key(k), v, "override")
    cfg = Stage2Config(**values)
    cfg.recipe = str(name_or_path)
    return cfg


def build_stage2_grpo_config(cfg: Stage2Config, output_dir: str | Path, validate_only: bool = False) -> Any:
    """The trl.GRPOConfig of the director run (recipe section + pipeline-managed fields)."""
    from trl import GRPOConfig

    kw: dict[str, Any] = {"report_to": "none", "seed": cfg.seed, "logging_steps": 1, "num_generations": 4,
                          "max_completion_length": 40, "save_strategy": "steps", "save_steps": 5, "save_total_limit": 1}
    kw.update(cfg.grpo)
    kw["model_init_kwargs"] = {"dtype": cfg.train_dtype, **(kw.get("model_init_kwargs") or {})}
    kw["reward_weights"] = list(cfg.reward_weights)
    if cfg.max_steps is not None:
        kw["max_steps"] = cfg.max_steps
    if validate_only:
        import torch

        if not torch.cuda.is_available():
            kw["use_cpu"] = True
            kw.pop("use_vllm", None)
            kw.pop("vllm_mode", None)
            kw.pop("bf16", None)
    return GRPOConfig(output_dir=str(output_dir), **kw)


def director_lora_config(cfg: Stage2Config, num_layers: int | None = None) -> Any:
    from peft import LoraConfig

    layers = {}
    if cfg.lora_layers and num_layers:
        n = min(cfg.lora_layers, num_layers)
        layers = {"layers_to_transform": list(range(num_layers - n, num_layers))}
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM", **layers)
