"""`python -m mascot compare-directors`: the shipped trained director against random order, round-robin and
the prompted director, on held-out seeker scripts rolled out with the simulated user and scored by the group
judge; paired tests over scenarios.

    python -m mascot compare-directors --run tiny-cpu            # recipe defaults: test split, replay user
    python -m mascot compare-directors --user llm --profile mbti-INFP --limit 8

Every system uses the same frozen speakers, the same simulated user, the same scenario seeds and the same
speaker sampling settings as the live chat; only the director differs. Each dialogue is cut into N-turn
blocks after the seeker's opening; a scenario's score is the mean block score (0-100). The trained director's
valid-directive rate (decisions that needed no fallback), repeats within a round, the share of openings
answered by at least two distinct personas, and the acceptability scorer's expected shares of persona replies a
person would accept / would not (every persona turn scored in its context) are reported too.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

BASELINES = ("random", "round-robin", "prompted")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, help="checkpoint run with speakers/ and director/ (default: the recipe's run)")
    p.add_argument("--recipe", default="tiny-cpu", help="stage-2 recipe for the evaluation settings (default: %(default)s)")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--systems", default="random,round-robin,prompted,trained", help="director modes to compare")
    p.add_argument("--split", default=None, help="seeker-script split (default: the recipe's eval_split)")
    p.add_argument("--scripts", default=None, help="seeker scripts source (default: the recipe's)")
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
    p.add_argument("--reuse", action="append", default=None, help="a previous --json file (repeatable): take the systems "
                   "it holds from it (same scenarios and settings are checked) and roll out only the others")
    p.add_argument("--max-new-tokens", type=int, default=None, help="speaker token budget for every system (default: the chat's)")
    p.add_argument("--backend", default="auto", help="backend for the frozen speakers, user and directors (auto: llamacpp "
                   "on CPU for the embedded GGUF; 'recipe' keeps the recipe's rollout_backend; default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1 on a shared CPU)")
    p.add_argument("--scorer", default="shipped", help="acceptability scorer for the Acceptable / Not acceptable "
                   "columns: shipped, a folder, or none (default: %(default)s)")


def paired_tests(a: list[float], b: list[float]) -> dict[str, float]:
    """Wilcoxon signed-rank (two-sided and 'a greater') and paired t-test over scenarios."""
    from scipy import stats

    diffs = [x - y for x, y in zip(a, b)]
    out: dict[str, float] = {"mean_diff": statistics.fmean(diffs), "wins": sum(d > 0 for d in diffs),
                             "ties": sum(d == 0 for d in diffs), "losses": sum(d < 0 for d in diffs)}
    if any(d != 0 for d in diffs):
        out["wilcoxon_p"] = float(stats.wilcoxon(a, b).pvalue)
        out["wilcoxon_p_greater"] = float(stats.wilcoxon(a, b, alternative="greater").pvalue)
        out["ttest_p"] = float(stats.ttest_rel(a, b).pvalue)
    else:
        out["wilcoxon_p"] = out["wilcoxon_p_greater"] = out["ttest_p"] = 1.0
    return out


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    from mascot.backends import load_backend, resolve_kind

    if resolve_kind(getattr(args, "backend", "auto")) == "llamacpp":  # before torch: see import_llama_cpp
        from mascot.backends.llamacpp.runtime import import_llama_cpp

        import_llama_cpp(args.settings.llamacpp_omp_wait_policy)
    import torch

    from mascot.errors import ConfigError
    from mascot.group.chat import OFFLINE, GroupChat
    from mascot.group.director import DIRECTOR_ADAPTER
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.rollouts import Rollout, roll_forward
    from mascot.judges.group import blocks_from_dialogue, load_group_judge, to_100
    from mascot.simusers import load_scripts
    from mascot.train.recipes import load_recipe
    from mascot.train.stage2.pipeline import make_user

    torch.set_num_threads(args.threads)
    overrides: dict[str, Any] = {"simuser": args.user, **({"simuser_profile": args.profile} if args.profile else {})}
    if getattr(args, "backend", "recipe") != "recipe":
        overrides["rollout_backend"] = args.backend
    cfg = load_recipe(args.recipe, overrides, stage="stage2")
    run_dir = Path(args.checkpoints_dir) / (args.run or cfg.run)
    if not run_dir.is_dir():
        raise ConfigError(f"No run folder {run_dir}: train one (python -m mascot train stage2 --recipe {args.recipe}) or pass --run.")
    from mascot.group.personas import load_pack

    pack = load_pack(cfg.pack)
    backend = load_backend(cfg.rollout_backend, model=cfg.model, dtype=cfg.dtype)
    engine = Engine(EngineConfig(backend=cfg.rollout_backend, model=cfg.model), backend, run_dir=run_dir)
    warnings = engine.attach_adapters(pack)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "trained" in systems and DIRECTOR_ADAPTER not in backend.adapters:
        raise ConfigError(f"{run_dir}/director/ holds no director adapter: the 'trained' system would silently be the prompted one.")
    scripts = load_scripts(args.scripts or cfg.scripts, args.split or cfg.eval_split, args.limit)
    user_turns = args.user_turns or cfg.eval_user_turns
    judge = load_group_judge(args.judge)
    from mascot.evaluation.runner import accept_dialogues, load_scorer

    scorer = load_scorer(None if str(getattr(args, "scorer", "shipped")).lower() == "none" else getattr(args, "scorer", "shipped"))
    results: dict[str, Any] = {"run": str(run_dir), "recipe": args.recipe, "split": args.split or cfg.eval_split,
                               "scenarios": [s.id for s in scripts], "user": args.user, "profile": args.profile,
                               "user_turns": user_turns, "block_turns": args.block_turns, "judge": judge.describe(),
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
    for system in systems:
        if system in previous:
            results["systems"][system] = previous[system]
            print(f"[compare] {system}: reused from {', '.join(args.reuse)}", flush=True)
            continue
        t0 = time.time()
        llm = system in ("trained", "prompted")
        chat = GroupChat(backend, pack.active, mode=system, max_speakers=cfg.max_speakers,
                         min_speakers=args.min_speakers if llm else None, policy=OFFLINE,
                         concern_opener=pack.concern_opener)
        if args.max_new_tokens:
            chat.speaker.params = chat.speaker.params.with_(max_new_tokens=args.max_new_tokens)
        user = make_user(cfg, backend, pack.active)
        rollouts = [Rollout.from_script(f"{system}:{s.id}" + (f"#{k}" if k else ""), s, seed=1000 + i + ROLLOUT_SEED_STEP * k)
                    for k in range(args.repeats) for i, s in enumerate(scripts)]
        for start in range(0, len(rollouts), args.batch_size):
            roll_forward(chat, rollouts[start : start + args.batch_size], user, user_turns=user_turns - 1)
        per_rollout, first_round_distinct, crit = [], [], {}
        for r in rollouts:
            blocks = blocks_from_dialogue(r.dialogue, 1, pack.active, args.block_turns, pack.setting)
            verdicts = [v for v in judge.score_blocks(blocks) if v.valid]
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
            "per_scenario": per_scenario, "per_rollout": per_rollout,
            "mean": statistics.fmean(x for x in per_scenario if not math.isnan(x)),
            "std": statistics.pstdev([x for x in per_scenario if not math.isnan(x)]),
            "criteria": {k: round(statistics.fmean(v), 2) for k, v in crit.items()},
            "decisions": len(decisions), "fallbacks": sum(d.source == "fallback" for d in decisions),
            "valid_directive_rate": 1 - sum(d.source == "fallback" for d in decisions) / max(1, len(decisions)),
            "repeats_in_round": repeats,
            "openings_with_2plus_personas": sum(n >= 2 for n in first_round_distinct) / len(first_round_distinct),
            "persona_turns_per_user_turn": sum(len([t for t in r.dialogue.turns if not t.is_user]) for r in rollouts)
            / max(1, sum(len([t for t in r.dialogue.turns if t.is_user]) for r in rollouts)),
            "acceptability": (accept_dialogues(scorer, [r.dialogue for r in rollouts], [p.name for p in pack.active])
                              if scorer is not None else None),
            "seconds": round(time.time() - t0, 1),
            "dialogues": [r.dialogue.to_dict() for r in rollouts],
        }
        print(f"[compare] {system}: mean {results['systems'][system]['mean']:.2f} ({results['systems'][system]['seconds']} s)", flush=True)
    if "trained" in results["systems"]:
        a = results["systems"]["trained"]["per_scenario"]
        results["tests"] = {b: paired_tests(a, results["systems"][b]["per_scenario"]) for b in systems if b != "trained"}
    return results


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


def render(results: dict[str, Any]) -> str:
    lines = [f"Director comparison — run {results['run']}, {len(results['scenarios'])} held-out scenarios ({results['split']})"
             + (f" x {results['repeats']} rollouts each (scores are per-scenario means)" if results.get("repeats", 1) > 1 else "") + ", "
             f"{results['user']} simulated user{' (' + results['profile'] + ')' if results.get('profile') else ''}, "
             f"{results['user_turns']} user turns, N={results['block_turns']} blocks, {results['judge']}", ""]
    crit = sorted({k for s in results["systems"].values() for k in s["criteria"]})
    lines.append(f"{'system':<12} {'group score':>16} " + " ".join(f"{c[:11]:>11}" for c in crit)
                 + f" {'valid dir.':>10} {'>=2 voices':>10} {'turns/msg':>9} {'repeats':>7} {'acceptable':>10} {'not acc.':>8}")
    for name, s in results["systems"].items():
        acc = s.get("acceptability") or {}
        lines.append(f"{name:<12} {s['mean']:>8.2f} ± {s['std']:<5.2f} " + " ".join(f"{s['criteria'].get(c, float('nan')):>11.1f}" for c in crit)
                     + f" {100 * s['valid_directive_rate']:>9.1f}% {100 * s['openings_with_2plus_personas']:>9.1f}%"
                     f" {s['persona_turns_per_user_turn']:>9.2f} {s['repeats_in_round']:>7}"
                     f" {acc.get('acceptable', float('nan')):>9.1f}% {acc.get('unacceptable', float('nan')):>7.1f}%")
    if results.get("tests"):
        lines += ["", "trained vs    mean diff   W/T/L     Wilcoxon p (two-sided, greater)   paired t p   beats at p<0.05?"]
        for b, t in results["tests"].items():
            win = "yes" if t["mean_diff"] > 0 and t["wilcoxon_p"] < 0.05 else "no"
            lines.append(f"{b:<12} {t['mean_diff']:>+9.2f}   {t['wins']}/{t['ties']}/{t['losses']:<6} "
                         f"{t['wilcoxon_p']:>12.4f}, {t['wilcoxon_p_greater']:.4f}        {t['ttest_p']:>8.4f}     {win}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    results = run_compare(args)
    print(render(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"details: {args.json}")
    return 0
