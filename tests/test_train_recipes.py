"""Recipes and the train CLI: loading, overrides, loud errors, the paper-gpu config (without vLLM),
resumability helpers and the launcher's command/progress handling."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mascot.__main__ import main as mascot_main
from mascot.errors import ConfigError
from mascot.train.progress import Manifest, ProgressLog, atomic_path, read_progress
from mascot.train.recipes import coerce, list_recipes, load_recipe
from mascot.train.stage1.config import Stage1Config
from mascot.train.trl_configs import (
    build_grpo_config,
    build_reward_config,
    build_sft_config,
    grpo_completion_budget,
    lora_config,
    reward_lora_config,
)

ROOT = Path(__file__).resolve().parents[1]


def test_bundled_recipes_load() -> None:
    assert {"tiny-cpu", "paper-gpu"} <= set(list_recipes())
    tiny = load_recipe("tiny-cpu")
    assert tiny.model == "embedded" and tiny.judge == "offline" and tiny.k == 8 and tiny.delta == 0.5
    assert tiny.rewards == ["persona_rm", "format", "judge", "mood", "balanced", "overlong", "relevance"]
    assert tiny.reward_weights == [1.0, 2.0, 1.0, 1.0, 2.0, 2.0, 0.0] and tiny.judge_length_control and tiny.rm_length_control
    assert tiny.persona_overrides["anchor"]["reward_weights"] == [1.0, 3.0, 1.0, 1.0, 2.0, 2.0, 1.5] and tiny.format_min_words == 15
    assert tiny.persona_overrides["beacon"] == {"sft_max_words": 35, "reward_weights": [0.5, 3.0, 1.0, 1.0, 2.0, 2.0, 1.0]}
    catalyst = tiny.for_persona("catalyst")  # the judge's Consistency x1.5 in place of its aggregate
    assert dict(zip(catalyst.rewards, catalyst.reward_weights)) == {
        "persona_rm": 1.0, "format": 2.0, "judge": 0.0, "mood": 1.0, "balanced": 2.0, "overlong": 2.0, "consistency": 1.5}
    assert tiny.rm_kind == "embedding" and tiny.rm_reward_norm == "global" and tiny.format_graded
    assert tiny.cross_persona_pairs > 0 and tiny.cross_persona_margin == 0.5 and tiny.grpo["max_steps"] >= 30
    assert tiny.sft_warm_start and tiny.sft_criterion is None and tiny.sft_trim and tiny.sft["num_train_epochs"] == 1
    assert tiny.sft_rank_weights and tiny.sft_rank_weights["relevance"] == 2.0 and tiny.backend == "auto"
    paper = load_recipe("paper-gpu")
    assert paper.rm_kind == "llm" and paper.rm_reward_norm == "group"  # the paper's reward model and scaling
    assert tiny.out == Path("checkpoints/tiny-cpu")
    paper = load_recipe("paper-gpu")
    assert paper.judge == "llm" and (paper.lora_r, paper.lora_alpha) == (16, 32)
    assert paper.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"] and paper.lora_layers is None
    assert paper.grpo["use_vllm"] is True and paper.grpo["vllm_mode"] == "colocate"
    assert paper.rewards == ["persona_rm", "format"] and paper.reward_weights == [1.0, 0.5]  # the paper's R


def test_yaml_path_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text("run: mine\nk: 3\ngrpo:\n  learning_rate: 1.0e-5\n")
    cfg = load_recipe(f, {"max-contexts": "7", "grpo.beta": "0.04", "personas": "Anchor,Beacon",
                          "reward_model.num_train_epochs": "2", "max_steps": "none", "lora_target_modules": "[q_proj, v_proj]"})
    assert (cfg.run, cfg.k, cfg.max_contexts, cfg.max_steps) == ("mine", 3, 7, None)
    assert cfg.grpo == {"learning_rate": 1e-5, "beta": 0.04} and cfg.reward_model == {"num_train_epochs": 2}
    assert cfg.personas == ["Anchor", "Beacon"] and cfg.lora_target_modules == ["q_proj", "v_proj"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"lora_rr": "3"}, r"Unknown option '--lora_rr'. Did you mean --lora_r.*Valid recipe fields: adapter_mode"),
        ({"grpo.betta": "1"}, r"Unknown field 'grpo.betta'.*GRPOConfig; similar fields: beta"),
        ({"trainer.x": "1"}, r"dotted overrides go to the sections reward_model, grpo"),
        ({"k": "many"}, r"Field 'k' expects int"),
        ({"grpo.output_dir": "/x"}, r"set by the pipeline itself"),
        ({"adapter_mode": "each"}, r"Valid adapter_mode names: per-persona, shared"),
        ({"reward_weights": "[1.0]"}, r"rewards has 7 entries but reward_weights has 1"),
        ({"sft.learning_rat": "1"}, r"Unknown field 'sft.learning_rat'.*SFTConfig; similar fields: learning_rate"),
        ({"k": "1"}, r"at least 2 candidates"),
        ({"overlong_buffer": "0"}, r"overlong_buffer=0 must be >= 1 token"),
        ({"score_max_words": "0"}, r"score_max_words=0 must be >= 1"),
    ],
)
def test_bad_fields_fail_loudly(overrides: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_recipe("tiny-cpu", overrides)


def test_unknown_recipe_and_unknown_yaml_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Valid recipe names: paper-gpu, tiny-cpu"):
        load_recipe("nope")
    f = tmp_path / "r.yaml"
    f.write_text("modle: x\n")
    with pytest.raises(ConfigError, match="unknown recipe field 'modle'. Valid fields:"):
        load_recipe(f)


def test_coerce() -> None:
    assert coerce("1e-5", float, "x") == 1e-5 and coerce("false", "bool | None", "x") is False
    assert coerce("3", "int | None", "x") == 3 and coerce("none", "int | None", "x") is None
    assert coerce("0.5,1", "list[float]", "x") == [0.5, 1.0]
    with pytest.raises(ConfigError):
        coerce("yes please", "bool", "x")


def test_cli_print_config_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    rc = mascot_main(["train", "stage1", "--recipe", "tiny-cpu", "--max-steps", "3", "--output", "/tmp/x",
                      "--lora-r", "4", "--grpo.beta=0.02", "--print-config"])
    assert rc == 0
    cfg = json.loads(capsys.readouterr().out)
    assert (cfg["max_steps"], cfg["output_dir"], cfg["lora_r"], cfg["grpo"]["beta"]) == (3, "/tmp/x", 4, 0.02)


def test_cli_short_field_is_not_an_abbreviated_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # `--k` is the recipe field k, not a prefix of --keep-freed-memory
    assert mascot_main(["train", "stage1", "--recipe", "tiny-cpu", "--k", "2", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 2


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert mascot_main(["train", "stage1", "--recipe", "tiny-cpu", "--bogus", "1", "--print-config"]) == 2
    assert "Unknown option '--bogus'" in capsys.readouterr().err
    assert mascot_main(["train", "stage1", "--recipe", "tiny-cpu", "--lora-r"]) == 2
    assert "needs a value" in capsys.readouterr().err


def test_paper_gpu_configs_build_without_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # any `import vllm` now raises ImportError
    cfg = load_recipe("paper-gpu")
    grpo = build_grpo_config(cfg, tmp_path / "g", validate_only=True, model_is_path=True)
    assert grpo.use_vllm and grpo.vllm_mode == "colocate" and grpo.num_generations == 8 and grpo.beta == 0.04
    assert grpo.reward_weights == [1.0, 0.5] and grpo.max_completion_length == 256 and grpo.bf16
    assert grpo.model_init_kwargs == {"dtype": "bfloat16"} and grpo.chat_template_kwargs == {"enable_thinking": False}
    assert grpo.generation_batch_size % grpo.num_generations == 0
    rm = build_reward_config(cfg, tmp_path / "r", validate_only=True)
    assert rm.learning_rate == 1e-5 and rm.num_train_epochs == 1 and rm.max_length == 2048
    lora = lora_config(cfg)
    assert (lora.r, lora.lora_alpha, sorted(lora.target_modules)) == (16, 32, ["k_proj", "o_proj", "q_proj", "v_proj"])
    assert reward_lora_config(cfg).modules_to_save == ["score"]


def test_paper_lora_share_is_0187_percent() -> None:
    from mascot.train.modeling import qwen3_8b_config, trainable_share_from_config

    cfg = load_recipe("paper-gpu")
    share = trainable_share_from_config(qwen3_8b_config(), cfg.lora_r, cfg.lora_alpha, cfg.lora_target_modules)
    assert share["trainable"] == 36 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024))
    assert round(share["share_pct"], 3) == 0.187


def test_tiny_cpu_configs_build(tmp_path: Path) -> None:
    cfg = load_recipe("tiny-cpu")
    grpo = build_grpo_config(cfg, tmp_path, max_steps=2)
    assert grpo.max_steps == 2 and grpo.num_generations == 4 and grpo.use_cpu and not grpo.use_vllm
    assert lora_config(cfg, num_layers=30).layers_to_transform == list(range(20, 30))
    assert grpo_completion_budget(cfg) == grpo.max_completion_length == 48  # the overlong reward's L_max
    assert grpo_completion_budget(load_recipe("tiny-cpu", {"grpo.max_completion_length": "64"})) == 64
    # without the field the pipeline gives GRPO the candidates' budget, and so does the overlong reward
    bare = load_recipe("tiny-cpu", {"max_new_tokens": "40"})
    bare.grpo.pop("max_completion_length")
    assert grpo_completion_budget(bare) == build_grpo_config(bare, tmp_path).max_completion_length == 40


def test_manifest_progress_and_atomic_writes(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "manifest.json")
    m.mark("generate", metrics={"n": 1, "nan": float("nan")})
    assert Manifest(tmp_path / "manifest.json").done("generate")
    log = ProgressLog(tmp_path / "progress.jsonl")
    log.event("grpo:anchor", "metrics", 1, 10, {"reward": 0.5})
    with (tmp_path / "progress.jsonl").open("a") as f:
        f.write('{"half": ')  # a writer mid-line
    assert read_progress(tmp_path / "progress.jsonl")[0]["metrics"] == {"reward": 0.5}
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("crash mid-write")
    assert not target.exists() and not list(tmp_path.glob(".out.txt*"))


def test_parallel_workers_redoing_their_steps_keep_each_others_entries(tmp_path: Path) -> None:
    """`--redo grpo` with workers: each worker starts from the previous run's entries for all adapters; the
    file must end with every worker's new entry, not a stale copy of the others' old ones."""
    path = tmp_path / "manifest.json"
    old = Manifest(path)
    for key in ("grpo:anchor", "grpo:beacon"):
        old.mark(key, metrics={"run": "old"})
    a, b = Manifest(path), Manifest(path)  # two workers, both loaded before either finished
    a.mark("grpo:anchor", metrics={"run": "new"})
    b.mark("grpo:beacon", metrics={"run": "new"})
    final = Manifest(path)
    assert final.get("grpo:anchor")["metrics"] == {"run": "new"}
    assert final.get("grpo:beacon")["metrics"] == {"run": "new"}


def test_redo_expands_to_later_steps_and_jobs(es_pack) -> None:
    from mascot.train.stage1.pipeline import expand_redo

    cfg = Stage1Config()
    assert expand_redo(["reward_model"], cfg, es_pack.active) == {
        "reward_model", "grpo", "grpo:anchor", "grpo:catalyst", "grpo:beacon"}
    assert expand_redo(["grpo:beacon"], cfg, es_pack.active) == {"grpo:beacon"}
    with pytest.raises(ConfigError, match="Jobs of this recipe"):
        expand_redo(["grpo:nobody"], cfg, es_pack.active)


def test_launcher_command_and_progress_tables(tmp_path: Path) -> None:
    from mascot.train.launch import build_command, metric_points, status_rows

    argv = build_command("tiny-cpu", max_steps=2, output=str(tmp_path), only=["generate"], overrides={"max_contexts": 4})
    assert argv[1:6] == ["-m", "mascot", "train", "stage1", "--recipe"] and "--max-contexts" not in argv
    assert argv[-2:] == ["--max_contexts", "4"] and "--only" in argv
    with pytest.raises(ConfigError):
        build_command("tiny-cpu", overrides={"nonsense": 1})
    events = [
        {"time": 1.0, "step": "generate", "status": "started"},
        {"time": 2.0, "step": "generate", "status": "progress", "done": 8, "total": 16},
        {"time": 3.0, "step": "generate", "status": "done"},
        {"time": 4.0, "step": "grpo:anchor", "status": "metrics", "done": 1, "total": 10,
         "metrics": {"reward": 0.25, "rewards/format_reward/mean": "0.5", "epoch": 0.1}},
    ]
    rows = status_rows(events)
    assert rows[0][:3] == ["generate", "done", "8/16"] and rows[1][:3] == ["grpo:anchor", "running", "1/10"]
    pts = metric_points(events)
    assert {p["series"] for p in pts} == {"grpo:anchor reward", "grpo:anchor rewards/format_reward/mean"}


def test_progress_tables_of_a_resumed_run_show_its_last_invocation() -> None:
    """A folder trained, then resumed (the GRPO step skipped as finished): the table shows the last invocation,
    a warm start left 'running' by an older run that finished reads done, and each trainer's curve is the one of
    the invocation that trained it, drawn once (not once per invocation)."""
    from mascot.train.launch import invocations, metric_points, status_rows

    def run(t0: float, grpo_trained: bool) -> list[dict]:
        rows = [{"time": t0, "step": "run", "status": "started"},
                {"time": t0 + 1, "step": "generate", "status": "skipped", "message": "finished earlier"}]
        if grpo_trained:
            rows += [{"time": t0 + 2, "step": "sft:anchor", "status": "metrics", "done": 5, "total": 5, "metrics": {"loss": 2.0}},
                     {"time": t0 + 3, "step": "grpo:anchor", "status": "started"}]
            rows += [{"time": t0 + 4 + k, "step": "grpo:anchor", "status": "metrics", "done": k + 1, "total": 3,
                      "metrics": {"reward": 0.1 * k, "loss": 1.0}} for k in range(3)]
            rows += [{"time": t0 + 8, "step": "grpo:anchor", "status": "done", "done": 3, "total": 3},
                     {"time": t0 + 8.5, "step": "grpo:anchor", "status": "skipped", "message": "finished earlier"}]
        else:
            rows.append({"time": t0 + 2, "step": "grpo:anchor", "status": "skipped", "message": "finished earlier"})
        return rows + [{"time": t0 + 9, "step": "run", "status": "done"}]

    events = run(100.0, True) + run(200.0, True) + run(300.0, False)
    assert len(invocations(events)) == 3
    rows = {r[0]: r for r in status_rows(events)}
    assert rows["generate"][1] == "skipped" and rows["generate"][4] == 0.0  # timed within the last invocation
    assert rows["grpo:anchor"][1] == "skipped" and rows["sft:anchor"][1] == "done"
    first = status_rows(run(100.0, True))
    assert {r[0]: r[1] for r in first}["grpo:anchor"] == "done"  # another worker's skip does not undo a done
    pts = metric_points(events, ("reward",))
    assert {p["series"] for p in pts} == {"grpo:anchor"} and [p["step"] for p in pts] == [1, 2, 3]


def test_configs_does_not_import_recipes() -> None:
    """The dependency runs one way: recipes -> the stage configs and the TRL builders, never back."""
    import ast
    import inspect

    import mascot.train.stage1.config as stage1_config
    import mascot.train.trl_configs as trl_configs

    for module in (stage1_config, trl_configs):
        tree = ast.parse(inspect.getsource(module))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "mascot.train.recipes" not in imported, module.__name__


def test_shipped_run_was_trained_with_the_recipe_as_it_loads_now() -> None:
    """checkpoints/tiny-cpu/recipe.json is the config the shipped run resolved: the bundled recipe still resolves to
    it, field for field, apart from the output folder the run was trained in; an option added since the run is off
    (None) in the recipe, which is what the run did without it."""
    shipped = json.loads((ROOT / "checkpoints" / "tiny-cpu" / "recipe.json").read_text(encoding="utf-8"))["config"]
    now = load_recipe("tiny-cpu").to_dict()
    added = set(now) - set(shipped)
    assert added <= {"pair_min_acceptability"} and all(now[k] is None for k in added)
    assert set(shipped) <= set(now)
    now = {k: v for k, v in now.items() if k not in added}
    assert {k: v for k, v in shipped.items() if k != "output_dir"} == {k: v for k, v in now.items() if k != "output_dir"}


def test_both_stages_share_one_loader_and_one_set_of_builders(tmp_path: Path) -> None:
    """Stage 2 loads through the same loader (same coercion, same suggestions) and builds with the same builders:
    one device rule and one layer rule for every trainer."""
    director = load_recipe("tiny-cpu", {"max-states": "5", "grpo.beta": "0.02"}, stage="stage2")
    assert director.max_states == 5 and director.grpo["beta"] == 0.02 and director.recipe == "tiny-cpu"
    assert list_recipes("stage2") == sorted(list_recipes("stage2")) and "tiny-cpu" in list_recipes("stage2")
    with pytest.raises(ConfigError, match=r"Unknown option '--max_statez'. Did you mean --max_states, --max_steps\?"):
        load_recipe("tiny-cpu", {"max_statez": "5"}, stage="stage2")
    with pytest.raises(ConfigError, match=r"dotted overrides go to the sections grpo\."):
        load_recipe("tiny-cpu", {"sft.learning_rate": "1"}, stage="stage2")
    with pytest.raises(ConfigError, match=r"Valid training stage names: stage1, stage2"):
        load_recipe("tiny-cpu", stage="stage3")
    f = tmp_path / "r.yaml"
    f.write_text("modle: x\n")
    with pytest.raises(ConfigError, match=r"unknown recipe field 'modle'.*Did you mean model\?"):
        load_recipe(f)
    paper = load_recipe("paper-gpu", stage="stage2")
    args = build_grpo_config(paper, tmp_path, validate_only=True, model_is_path=True)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.num_generations == 8  # the recipe as written
    with pytest.raises(ConfigError, match=r"lora_layers=6 needs the model's number of layers"):
        lora_config(director)  # no layer count: a clear error in both stages
    with pytest.raises(ConfigError, match=r"lora_layers=10 needs the model's number of layers"):
        lora_config(load_recipe("tiny-cpu"))
    assert lora_config(director, num_layers=30).layers_to_transform == list(range(24, 30))
    sft = build_sft_config(load_recipe("tiny-cpu", {"warm_start_epochs": "2"}, stage="stage2"), tmp_path, model_is_path=True)
    assert (sft.num_train_epochs, sft.learning_rate, sft.max_length, sft.model_init_kwargs) == (2.0, 2e-3, 1024, {"dtype": "float32"})
    assert sft.use_cpu and not sft.bf16 and sft.per_device_train_batch_size == 4 and sft.lr_scheduler_type == "constant"


def test_new_stage1_fields_fail_loudly() -> None:
    with pytest.raises(ConfigError, match="embedding, llm"):
        load_recipe("tiny-cpu", {"rm_kind": "bert"})
    with pytest.raises(ConfigError, match="global, group"):
        load_recipe("tiny-cpu", {"rm_reward_norm": "batch"})
    with pytest.raises(ConfigError, match="cross_persona_pairs"):
        load_recipe("tiny-cpu", {"cross_persona_pairs": "-1"})


def test_grpo_workers_under_redo_are_not_trained_again_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the workers re-ran the adapters that `--redo grpo` named, the in-process loop finds them finished
    and not pending a redo (it used to train every one of them a second time)."""
    import subprocess

    from mascot.files.checkpoints import speakers_dir
    from mascot.train.stage1 import pipeline as stage1
    from mascot.train.stage1.speakers import adapter_jobs
    from mascot.train.stage1.workers import train_in_workers

    cfg = load_recipe("tiny-cpu", {"output_dir": str(tmp_path / "run"), "grpo_workers": "3"})
    run = stage1.open_run(cfg, show_bars=False)
    run.cache["redo"] = stage1.expand_redo(["grpo"], cfg, run.personas)
    started: list[list[str]] = []

    class FakeWorker:
        def __init__(self, argv: list[str], **_: object) -> None:
            started.append(argv)
            job = argv[argv.index("--only") + 1]
            Manifest(run.manifest.path).mark(job, metrics={"steps": 30})
            (speakers_dir(run.out) / job.split(":", 1)[1]).mkdir(parents=True, exist_ok=True)
            (speakers_dir(run.out) / job.split(":", 1)[1] / "adapter_config.json").write_text("{}")
            self.returncode = 0

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeWorker)
    train_in_workers(run)
    assert len(started) == 3 and all("--redo" in argv for argv in started)
    # the allocator switch travels on each worker's command line, not through the environment
    assert all(argv[argv.index("--keep-freed-memory") + 1] in ("yes", "no") for argv in started)
    for name, _, _targets in adapter_jobs(cfg, run.personas, speakers_dir(run.out)):
        assert run.manifest.done(f"grpo:{name}") and f"grpo:{name}" not in run.cache["redo"]


def test_persona_overrides_per_adapter_and_loud_errors(tmp_path: Path, es_pack) -> None:
    """Each persona's warm start and GRPO run can be set its own way; the others keep the recipe's settings."""
    cfg = load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {reward_weights: [1, 3, 1, 1, 0, 2, 0], sft_rank_weights: {relevance: 4}}}"})
    beacon, anchor = cfg.for_persona("beacon"), cfg.for_persona("anchor")
    assert build_grpo_config(beacon, tmp_path).reward_weights == [1.0, 3.0, 1.0, 1.0, 0.0, 2.0, 0.0] and beacon.sft_rank_weights == {"relevance": 4}
    catalyst = cfg.for_persona("catalyst")  # the recipe's own overrides (Anchor's, Beacon's) are replaced by the given ones
    assert catalyst is cfg and build_grpo_config(catalyst, tmp_path).reward_weights == list(cfg.reward_weights)
    assert anchor is cfg
    assert beacon.persona_overrides == {} and beacon.k == cfg.k
    with pytest.raises(ConfigError, match=r"persona_overrides\['beacon'\]: rewards has 7 entries but reward_weights has 2"):
        load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {reward_weights: [1, 3]}}"})
    with pytest.raises(ConfigError, match="give a list of numbers"):
        load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {reward_weights: [a, b, c, d, e, f, g]}}"})
    with pytest.raises(ConfigError, match=r"sets k; fields a persona may set: rewards, reward_weights, sft_rank_weights"):
        load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {k: 16}}"})
    with pytest.raises(ConfigError, match=r"persona_overrides\['beacon'\]: Unknown field 'grpo.lr_schedule'"):
        load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {grpo: {lr_schedule: linear}}}"})
    slower = load_recipe("tiny-cpu", {"persona_overrides": "{catalyst: {grpo: {learning_rate: 1.0e-4}}}"})
    assert build_grpo_config(slower.for_persona("catalyst"), tmp_path).learning_rate == 1e-4
    assert build_grpo_config(slower.for_persona("catalyst"), tmp_path).max_steps == slower.grpo["max_steps"]
    catalyst = slower.for_persona("catalyst")  # a trainer-section override updates the section, key by key
    assert catalyst.grpo["num_generations"] == slower.grpo["num_generations"] and slower.grpo["learning_rate"] != 1e-4
    assert slower.for_persona("anchor").grpo == slower.grpo  # other personas keep the recipe's section
    with pytest.raises(ConfigError, match="needs adapter_mode: per-persona"):
        load_recipe("tiny-cpu", {"persona_overrides": "{beacon: {sft_max_words: 20}}", "adapter_mode": "shared"})
    from mascot.train.stage1.pipeline import open_run

    bad = load_recipe("tiny-cpu", {"persona_overrides": "{becon: {sft_max_words: 20}}", "output_dir": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match="'becon', not a trained persona.*valid keys: anchor, catalyst, beacon"):
        open_run(bad, show_bars=False)


def test_persona_reward_list_and_reward_names(tmp_path: Path) -> None:
    """A persona can add a reward of its own (Catalyst's judge Consistency); the parent then loads what every job needs.
    An unknown reward name fails when the recipe loads, not in a GRPO worker after its warm start."""
    cfg = load_recipe("tiny-cpu", {"persona_overrides": "{catalyst: {rewards: [persona_rm, format, consistency], "
                                                         "reward_weights: [1, 2, 3]}}"})
    catalyst = cfg.for_persona("catalyst")
    assert catalyst.rewards == ["persona_rm", "format", "consistency"]
    assert build_grpo_config(catalyst, tmp_path).reward_weights == [1.0, 2.0, 3.0]
    assert cfg.for_persona("anchor").rewards == cfg.rewards and "consistency" not in cfg.rewards
    assert cfg.all_rewards() == [*cfg.rewards, "consistency"]
    with pytest.raises(ConfigError, match=r"persona_overrides\['catalyst'\]: rewards has 2 entries but reward_weights has 7"):
        load_recipe("tiny-cpu", {"persona_overrides": "{catalyst: {rewards: [persona_rm, format]}}"})
    with pytest.raises(ConfigError, match=r"Unknown reward 'consistancy'\. Valid reward names: acceptability, balanced, consistency"):
        load_recipe("tiny-cpu", {"persona_overrides": "{catalyst: {rewards: [persona_rm, consistancy], reward_weights: [1, 1]}}"})
    with pytest.raises(ConfigError, match=r"Unknown reward 'fromat'"):
        load_recipe("tiny-cpu", {"rewards": "[persona_rm, fromat]", "reward_weights": "[1, 1]", "persona_overrides": "{}"})


def test_grpo_rollouts_field_is_checked() -> None:
    """Who samples GRPO's completions: a registry of two names, and never two samplers at once."""
    assert load_recipe("tiny-cpu", {}).grpo_rollouts in ("trainer", "llamacpp")
    assert load_recipe("paper-gpu", {}).grpo_rollouts == "trainer"  # TRL's vLLM path on GPU
    with pytest.raises(ConfigError, match=r"Unknown grpo_rollouts 'vllm-ish'\. Valid grpo_rollouts names: llamacpp, trainer"):
        load_recipe("tiny-cpu", {"grpo_rollouts": "vllm-ish"})
    with pytest.raises(ConfigError, match="both generate GRPO's completions"):
        load_recipe("tiny-cpu", {"grpo_rollouts": "llamacpp", "grpo.use_vllm": "true"})
