"""Group-level evaluation, `python -m mascot eval --level group` (alias: `compare-directors`): MASCOT against its
ablations and baselines on held-out seeker scripts rolled out with the simulated user through the chat's conversation
step, scored by the group judge in N-turn blocks; paired tests over scenarios against MASCOT, Holm-corrected.

    python -m mascot eval --level group --run tiny-cpu                   # recipe defaults: test split, replay user
    python -m mascot eval --level group --systems mascot,mascot-p,mascot-c --user llm --profile mbti-INFP --limit 8

Systems (`GROUP_SYSTEMS`) differ in who picks the next speaker and how the speakers are prompted; all share the
frozen backend, the simulated user, the scenario seeds and the live chat's speaker sampling. Each dialogue is cut
into N-turn blocks after the seeker's opening; a scenario's score is the mean block score (0-100), reported overall
and by the opening's valence. Also reported: the director's valid-directive rate (decisions that needed no
fallback), repeats within a round, the share of openings answered by at least two distinct personas, and the
acceptability scorer's expected shares of persona replies a person would accept / would not.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError, unknown_name
from mascot.jobs.events import tracked


@dataclass(frozen=True)
class GroupSystem:
    """One group-level system: who picks the next speaker and how the speakers are prompted."""

    label: str
    mode: str  # the director: trained | prompted | round-robin | random
    use_adapters: bool = True  # the trained speaker LoRAs; False: the same persona prompts on the base model
    style: str = "persona"  # speaker prompt style (mascot.group.prompts)
    one_voice: bool = False  # one assistant (the first active persona's slot) answers every message


GROUP_SYSTEMS = {
    "mascot": GroupSystem("MASCOT", "trained"),
    "mascot-p": GroupSystem("MASCOT-P: trained director, prompted speakers", "trained", use_adapters=False),
    "mascot-c": GroupSystem("MASCOT-C: trained speakers, random order", "random"),
    "round-robin": GroupSystem("Round-robin, trained speakers", "round-robin"),
    "prompted": GroupSystem("Prompted director, trained speakers", "prompted"),
    "zero-shot": GroupSystem("Zero-Shot, one voice", "round-robin", use_adapters=False, style="zero-shot", one_voice=True),
    "few-shot": GroupSystem("Few-Shot, one voice", "round-robin", use_adapters=False, style="few-shot", one_voice=True),
}
ALIASES = {"trained": "mascot", "random": "mascot-c"}  # the director modes' names, as earlier result files use them


def group_system(name: str) -> GroupSystem:
    """The registered system `name` (or an alias); unknown names list the valid ones."""
    key = ALIASES.get(name, name)
    if key not in GROUP_SYSTEMS:
        raise unknown_name("group-level system", name, [*GROUP_SYSTEMS, *ALIASES])
    return GROUP_SYSTEMS[key]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, help="checkpoint run with speakers/ and director/ (default: the recipe's run)")
    p.add_argument("--recipe", default="tiny-cpu", help="stage-2 recipe for the evaluation settings (default: %(default)s)")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--level", choices=("group",), default="group", help="group: whole conversations (this command)")
    p.add_argument("--systems", default="mascot,mascot-p,mascot-c,round-robin,prompted,zero-shot",
                   help=f"comma-separated: {', '.join(GROUP_SYSTEMS)} (aliases: trained = mascot, random = mascot-c); "
                        "each is tested against mascot (default: %(default)s)")
    p.add_argument("--pack", default=None, help="persona pack (default: the recipe's); with --scripts qmsum, meeting")
    p.add_argument("--split", default=None, help="seeker-script split (default: the recipe's eval_split)")
    p.add_argument("--scripts", default=None, help="seeker scripts source: bundled, esconv[:PATH], qmsum[:PATH] "
                   "(default: the recipe's)")
    p.add_argument("--limit", type=int, default=None, help="at most N scenarios")
    p.add_argument("--user-turns", type=int, default=None, help="user messages per dialogue, opening included")
    p.add_argument("--user", default="replay", help="simulated user: replay | llm")
    p.add_argument("--profile", default=None, help="llm simulated user's personality profile")
    p.add_argument("--judge", default="offline", help="group judge: offline | llm")
    p.add_argument("--block-turns", type=int, default=4, help="N: turns per judged block (default: %(default)s)")
    p.add_argument("--min-speakers", type=int, default=None, help="fewest personas per message before the LLM directors "
                   "may yield (default: the chat's, 3)")
    p.add_argument("--batch-size", type=int, default=24, help="dialogues rolled out together")
    p.add_argument("--repeats", type=int, default=1, help="rollouts per scenario, each with its own seed; the paired "
                   "tests compare each scenario's mean (one rollout's group score moves by about 6 points per script)")
    p.add_argument("--json", default=None, help="write all dialogues, scores and tests here")
    p.add_argument("--markdown", default=None, help="write the table in Markdown here")
    p.add_argument("--csv", default=None, help="write one row per system (scores by valence, criteria, tests) here")
    p.add_argument("--sweep", choices=("big5", "mbti"), default=None,
                   help="run the systems under each Big Five profile (10) or MBTI type (16) of the llm simulated user; "
                        "--limit defaults to 3 scenarios per profile")
    p.add_argument("--heatmap", default=None, help="with --sweep: write the persona x profile heatmap PNG here")
    p.add_argument("--export-pairs", nargs=2, metavar=("A,B", "FILE"), default=None,
                   help="write systems A and B's dialogues on the same scenarios as pairs for `python -m annotation "
                        "import-pairs` (a human study of any row of the table)")
    p.add_argument("--reuse", action="append", default=None, help="a previous --json file (repeatable): take the systems "
                   "it holds from it (same scenarios and settings are checked) and roll out only the others")
    p.add_argument("--cache", default=None, help="folder for finished rollout batches: a rerun of an interrupted "
                   "evaluation with the same settings loads them instead of rolling them out again")
    p.add_argument("--max-new-tokens", type=int, default=None, help="speaker token budget for every system (default: the chat's)")
    p.add_argument("--backend", default="auto", help="backend for the frozen speakers, user and directors (auto: llamacpp "
                   "on CPU for the embedded GGUF; 'recipe' keeps the recipe's rollout_backend; default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1 on a shared CPU)")
    p.add_argument("--scorer", default="shipped", help="acceptability scorer for the Acceptable / Not acceptable "
                   "columns: shipped, a folder, or none (default: %(default)s)")


def paired_tests(a: list[float], b: list[float]) -> dict[str, float]:
    """Wilcoxon signed-rank (two-sided and 'a greater'), the exact sign test and the paired t-test over scenarios
    (a scenario without a valid score on either side is left out)."""
    from scipy import stats

    pairs = [(x, y) for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
    diffs = [x - y for x, y in pairs]
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    out: dict[str, float] = {"mean_diff": statistics.fmean(diffs) if diffs else math.nan, "wins": wins,
                             "ties": len(diffs) - wins - losses, "losses": losses,
                             "sign_p": float(stats.binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0}
    if wins + losses:
        xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
        out["wilcoxon_p"] = float(stats.wilcoxon(xs, ys).pvalue)
        out["wilcoxon_p_greater"] = float(stats.wilcoxon(xs, ys, alternative="greater").pvalue)
        out["ttest_p"] = float(stats.ttest_rel(xs, ys).pvalue)
    else:
        out["wilcoxon_p"] = out["wilcoxon_p_greater"] = out["ttest_p"] = 1.0
    return out


def against_reference(results: dict[str, Any], reference: str) -> dict[str, dict[str, float]]:
    """Every other system against `reference` (a - b = reference - other), with the two-sided Wilcoxon p-values
    Holm-corrected across the comparisons (`wilcoxon_p_holm`)."""
    from mascot.stats import holm

    ref = results["systems"][reference]["per_scenario"]
    tests = {b: paired_tests(ref, s["per_scenario"]) for b, s in results["systems"].items() if b != reference}
    for t, adjusted in zip(tests.values(), holm([t["wilcoxon_p"] for t in tests.values()])):
        t["wilcoxon_p_holm"] = adjusted
    return tests


def by_valence(per_scenario: list[float], valences: list[str]) -> dict[str, float]:
    """Mean scenario score per valence of the opening (negative / positive / neutral; '' when unknown)."""
    out: dict[str, list[float]] = {}
    for x, v in zip(per_scenario, valences):
        if not math.isnan(x):
            out.setdefault(v or "unknown", []).append(x)
    return {v: round(statistics.fmean(xs), 2) for v, xs in sorted(out.items())}


def run_compare(args: argparse.Namespace, loaded: dict[str, Any] | None = None) -> dict[str, Any]:
    """Roll out and score every system of `args`. `loaded` keeps the backend, adapters, judge and scorer between
    calls that differ only in the simulated user's profile (the personality sweeps)."""
    from mascot.backends import load_backend, resolve_kind

    if resolve_kind(getattr(args, "backend", "auto")) == "llamacpp":  # before torch: see import_llama_cpp
        from mascot.backends.llamacpp.runtime import import_llama_cpp

        import_llama_cpp(args.settings.llamacpp_omp_wait_policy)
    import torch

    from mascot.data.scenario import valence_of
    from mascot.group.chat import OFFLINE, GroupChat
    from mascot.group.director import DIRECTOR_ADAPTER
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.rollouts import Rollout, roll_forward
    from mascot.judges.group import blocks_from_dialogue, load_group_judge, to_100
    from mascot.simusers import load_scripts
    from mascot.train.recipes import load_recipe
    from mascot.train.stage2.pipeline import make_user

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems:
        raise ConfigError(f"--systems is empty. Valid systems: {', '.join(GROUP_SYSTEMS)}.")
    chosen = {name: group_system(name) for name in systems}  # unknown names fail before anything loads
    torch.set_num_threads(args.threads)
    overrides: dict[str, Any] = {"simuser": args.user, **({"simuser_profile": args.profile} if args.profile else {}),
                                 **({"pack": args.pack} if getattr(args, "pack", None) else {})}
    if getattr(args, "backend", "recipe") != "recipe":
        overrides["rollout_backend"] = args.backend
    cfg = load_recipe(args.recipe, overrides, stage="stage2")
    run_dir = Path(args.checkpoints_dir) / (args.run or cfg.run)
    if not run_dir.is_dir():
        raise ConfigError(f"No run folder {run_dir}: train one (python -m mascot train stage2 --recipe {args.recipe}) or pass --run.")
    from mascot.evaluation.rollout_cache import RolloutCache
    from mascot.evaluation.runner import accept_dialogues, load_scorer
    from mascot.group.personas import load_pack

    loaded = {} if loaded is None else loaded
    if not loaded:
        pack = load_pack(cfg.pack)
        backend = load_backend(cfg.rollout_backend, model=cfg.model, dtype=cfg.dtype)
        engine = Engine(EngineConfig(backend=cfg.rollout_backend, model=cfg.model), backend, run_dir=run_dir)
        scorer_name = str(getattr(args, "scorer", "shipped"))
        loaded.update(pack=pack, backend=backend, warnings=engine.attach_adapters(pack), judge=load_group_judge(args.judge),
                      scorer=load_scorer(None if scorer_name.lower() == "none" else scorer_name))
    pack, backend, warnings, judge, scorer = (loaded[k] for k in ("pack", "backend", "warnings", "judge", "scorer"))
    needs_director = [n for n, g in chosen.items() if g.mode == "trained"]
    if needs_director and DIRECTOR_ADAPTER not in backend.adapters:
        raise ConfigError(f"{run_dir}/director/ holds no director adapter: {', '.join(needs_director)} would silently use "
                          "the prompted director. Train one (python -m mascot train stage2) or leave them out.")
    scripts = load_scripts(args.scripts or cfg.scripts, args.split or cfg.eval_split, args.limit)
    user_turns = args.user_turns or cfg.eval_user_turns
    results: dict[str, Any] = {"run": str(run_dir), "recipe": args.recipe, "split": args.split or cfg.eval_split,
                               "scenarios": [s.id for s in scripts], "user": args.user, "profile": args.profile,
                               "user_turns": user_turns, "block_turns": args.block_turns, "judge": judge.describe(),
                               # the opening's valence, or a meeting's type (the columns of the paper's Table C)
                               "valences": [valence_of(s.emotion) or s.meta.get("domain", "") for s in scripts],
                               "warnings": warnings, "systems": {}}
    previous: dict[str, Any] = {}
    for path in args.reuse or []:
        prev = json.loads(Path(path).read_text(encoding="utf-8"))
        here = {**results, "max_new_tokens": args.max_new_tokens, "min_speakers": args.min_speakers, "repeats": args.repeats}
        for key in ("scenarios", "user", "profile", "user_turns", "block_turns", "max_new_tokens", "min_speakers", "repeats"):
            if prev.get(key, 1 if key == "repeats" else None) != here.get(key):
                raise ConfigError(f"--reuse {path}: its {key!r} ({prev.get(key)!r}) differs from this run's; "
                                  "rerun every system instead.")
        previous.update(prev["systems"])
    results["max_new_tokens"] = args.max_new_tokens
    results["min_speakers"] = args.min_speakers
    results["repeats"] = args.repeats
    if args.repeats < 1:
        raise ConfigError(f"--repeats {args.repeats}: give at least 1 rollout per scenario.")
    cache = RolloutCache(getattr(args, "cache", None), {
        "run": str(run_dir), "adapters": adapter_fingerprint(run_dir), "recipe": args.recipe, "pack": cfg.pack,
        "model": cfg.model, "backend": cfg.rollout_backend, "scripts": args.scripts or cfg.scripts,
        "split": results["split"], "user": args.user, "profile": args.profile, "user_turns": user_turns,
        "max_new_tokens": args.max_new_tokens})
    for system in systems:
        if system in previous:
            results["systems"][system] = previous[system]
            print(f"[compare] {system}: reused from {', '.join(args.reuse)}", flush=True)
            continue
        t0 = time.time()
        spec = chosen[system]
        llm = spec.mode in ("trained", "prompted")
        roster = pack.active[:1] if spec.one_voice else pack.active
        chat = GroupChat(backend, roster, mode=spec.mode, max_speakers=1 if spec.one_voice else cfg.max_speakers,
                         min_speakers=args.min_speakers if llm else None, policy=OFFLINE, speaker_style=spec.style,
                         use_adapters=spec.use_adapters, concern_opener=pack.concern_opener)
        if args.max_new_tokens:
            chat.speaker.params = chat.speaker.params.with_(max_new_tokens=args.max_new_tokens)
        user = make_user(cfg, backend, roster)
        rollouts = [Rollout.from_script(f"{system}:{s.id}" + (f"#{k}" if k else ""), s, seed=1000 + i + ROLLOUT_SEED_STEP * k)
                    for k in range(args.repeats) for i, s in enumerate(scripts)]
        for start in tracked(range(0, len(rollouts), args.batch_size), step=f"{system}: rolling out", bar=False):
            batch = rollouts[start : start + args.batch_size]
            own = {"min_speakers": args.min_speakers} if llm else {}
            if not cache.restore(system, batch, own):
                roll_forward(chat, batch, user, user_turns=user_turns - 1)
                cache.store(system, batch, own)
        per_rollout, first_round_distinct, crit, failures = [], [], {}, JudgeFailures()
        for r in tracked(rollouts, step=f"{system}: judging", bar=False):
            blocks = blocks_from_dialogue(r.dialogue, 1, roster, args.block_turns, pack.setting)
            verdicts = failures.keep_valid(judge, blocks)
            per_rollout.append(statistics.fmean(to_100(v.aggregate) for v in verdicts) if verdicts else math.nan)
            for v in verdicts:
                for k, x in (v.scores or {}).items():
                    crit.setdefault(k, []).append(to_100(x))
            first = []
            for t in r.dialogue.turns[1:]:
                if t.is_user:
                    break
                first.append(t.speaker)
            first_round_distinct.append(len(set(first)))
        decisions = [d for r in rollouts for d in r.decisions]
        repeats = 0
        for r in rollouts:
            round_speakers: list[str] = []
            for t in r.dialogue.turns:
                if t.is_user:
                    round_speakers = []
                elif t.speaker in round_speakers:
                    repeats += 1
                else:
                    round_speakers.append(t.speaker)
        per_scenario = scenario_means(per_rollout, len(scripts))
        results["systems"][system] = {
            "label": spec.label, "per_scenario": per_scenario, "per_rollout": per_rollout,
            "by_valence": by_valence(per_scenario, results["valences"]),
            "mean": statistics.fmean(x for x in per_scenario if not math.isnan(x)),
            "std": statistics.pstdev([x for x in per_scenario if not math.isnan(x)]),
            "criteria": {k: round(statistics.fmean(v), 2) for k, v in crit.items()},
            "decisions": len(decisions), "fallbacks": sum(d.source == "fallback" for d in decisions),
            "valid_directive_rate": 1 - sum(d.source == "fallback" for d in decisions) / max(1, len(decisions)),
            "repeats_in_round": repeats,
            "openings_with_2plus_personas": sum(n >= 2 for n in first_round_distinct) / len(first_round_distinct),
            "persona_turns_per_user_turn": sum(len([t for t in r.dialogue.turns if not t.is_user]) for r in rollouts)
            / max(1, sum(len([t for t in r.dialogue.turns if t.is_user]) for r in rollouts)),
            "acceptability": (accept_dialogues(scorer, [r.dialogue for r in rollouts], [p.name for p in roster])
                              if scorer is not None else None),
            "judged_blocks": failures.blocks, "judge_failures": failures.count, "judge_errors": failures.examples,
            "seconds": round(time.time() - t0, 1),
            "dialogues": [r.dialogue.to_dict() for r in rollouts],
        }
        done = results["systems"][system]
        note = f", {failures.count} of {failures.blocks} judged blocks failed and were left out" if failures.count else ""
        print(f"[compare] {system}: mean {done['mean']:.2f} ({done['seconds']} s{note})", flush=True)
    if cache.folder is not None:
        results["cache"] = {"folder": str(cache.folder), "batches_loaded": cache.loaded, "batches_rolled_out": cache.saved}
        print(f"[compare] cache {cache.folder}: {cache.loaded} batches loaded, {cache.saved} rolled out and saved", flush=True)
    reference = next((n for n in systems if ALIASES.get(n, n) == "mascot"), None)
    if reference is not None and len(systems) > 1:
        results["reference"] = reference
        results["tests"] = against_reference(results, reference)
    return results


class JudgeFailures:
    """Blocks the group judge could not score: left out of the means, counted for the report. A judge that raises
    on a batch is asked again block by block, so one bad block never aborts the run."""

    def __init__(self) -> None:
        self.blocks = self.count = 0
        self.examples: list[str] = []

    def keep_valid(self, judge: Any, blocks: list[Any]) -> list[Any]:
        try:
            verdicts = judge.score_blocks(blocks)
        except Exception:  # noqa: BLE001 - retried one block at a time below
            verdicts = [self._one(judge, b) for b in blocks]
        self.blocks += len(blocks)
        bad = [v for v in verdicts if not v.valid]
        self.count += len(bad)
        for v in bad:
            if len(self.examples) < 5:
                self.examples.append(str(v.error)[:200])
        return [v for v in verdicts if v.valid]

    @staticmethod
    def _one(judge: Any, block: Any) -> Any:
        from mascot.judges.group import GroupVerdict

        try:
            return judge.score_blocks([block])[0]
        except Exception as exc:  # noqa: BLE001 - recorded as this block's failure
            return GroupVerdict.invalid(f"{type(exc).__name__}: {exc}")


def adapter_fingerprint(run_dir: Path) -> list[list[Any]]:
    """Name, size and modification time of every adapter weight file in `run_dir`: a retrained adapter is a new key."""
    return [[str(p.relative_to(run_dir)), p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(run_dir.rglob("*.safetensors"))]


ROLLOUT_SEED_STEP = 7919  # rollout k of a scenario uses seed 1000 + index + k * this


def scenario_means(per_rollout: list[float], n_scenarios: int) -> list[float]:
    """Each scenario's mean group score over its rollouts (rollout k of scenario i sits at k * n_scenarios + i);
    a scenario whose every rollout had no valid verdict stays NaN.

    >>> scenario_means([60.0, 70.0, 64.0, float("nan")], 2)
    [62.0, 70.0]
    """
    out = []
    for i in range(n_scenarios):
        got = [x for x in per_rollout[i::n_scenarios] if not math.isnan(x)]
        out.append(statistics.fmean(got) if got else math.nan)
    return out


def _write(path: str | Path, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")


def main(args: argparse.Namespace) -> int:
    if args.sweep:
        from mascot.evaluation.personality_sweep import render_sweep, run_sweep, save_heatmap

        out = run_sweep(args)
        print(render_sweep(out))
        if args.json:
            _write(args.json, json.dumps(out, indent=1, ensure_ascii=False))
        if args.heatmap:
            print(f"heatmap: {save_heatmap(out, args.heatmap)}")
        return 0
    from mascot.evaluation.group_report import csv_table, export_pairs, markdown, render

    results = run_compare(args)
    print(render(results))
    if args.json:
        _write(args.json, json.dumps(results, indent=1, ensure_ascii=False))
        print(f"details: {args.json}")
    if args.export_pairs:
        names, path = args.export_pairs
        a, _, b = names.partition(",")
        pairs = export_pairs(results, a.strip(), b.strip())
        _write(path, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in pairs))
        print(f"pairs for annotation: {path} ({len(pairs)}; python -m annotation import-pairs {path} --study ID)")
    for path, text in ((args.markdown, markdown), (args.csv, csv_table)):
        if path:
            _write(path, text(results))
    return 0
