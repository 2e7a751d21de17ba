"""Preference-pair building: the margin delta, ties, invalid verdicts, duplicates, caps, extra pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mascot.errors import ConfigError
from mascot.train.stage1.pairs import PairStats, build_pairs, group_pairs, load_extra_pairs


def test_margin_is_inclusive_and_orders_chosen_first() -> None:
    pairs = group_pairs(["a", "b", "c"], [4.0, 3.5, 3.4], delta=0.5)
    assert pairs == [(0, 1, 0.5), (0, 2, 0.6)]  # 0.5 exactly qualifies (>= delta); b vs c (0.1) does not


def test_ties_never_pair_even_with_zero_delta() -> None:
    st = PairStats()
    assert group_pairs(["a", "b"], [3.0, 3.0], delta=0.0, stats=st) == []
    assert st.below_margin == 1 and st.pairs == 0


def test_float_error_does_not_drop_a_qualifying_pair() -> None:
    # means of five integer criteria: 3.6 - 3.1 is 0.4999999... in floating point
    assert group_pairs(["a", "b"], [3.6, 3.1], delta=0.5) == [(0, 1, 0.5)]


def test_invalid_verdicts_are_dropped_and_counted() -> None:
    st = PairStats()
    pairs = group_pairs(["a", "b", "c", "d"], [4.0, None, math.nan, 2.0], delta=0.5, stats=st)
    assert pairs == [(0, 3, 2.0)]
    assert st.invalid == 2 and st.candidates == 4


def test_duplicate_texts_pair_once() -> None:
    st = PairStats()
    pairs = group_pairs(["same", "same ", "other"], [4.0, 4.0, 2.0], delta=0.5, stats=st)
    assert pairs == [(0, 2, 2.0)] and st.duplicates == 1


def test_cap_keeps_the_widest_gaps() -> None:
    pairs = group_pairs(list("abcd"), [5.0, 4.0, 3.0, 1.0], delta=0.5, max_pairs=2)
    assert [(i, j) for i, j, _ in pairs] == [(0, 3), (1, 3)]


def test_build_pairs_carries_group_fields_and_stats() -> None:
    groups = [
        {"group_id": "s1:anchor", "persona": "Anchor", "split": "train", "rm_prompt": "P1",
         "candidates": ["good", "bad", "meh"], "scores": [4.2, 2.0, 3.9]},
        {"group_id": "s2:anchor", "persona": "Anchor", "split": "rm_eval", "rm_prompt": "P2",
         "candidates": ["x", "y"], "scores": [3.0, None]},
    ]
    rows, st = build_pairs(groups, delta=0.5)
    assert [(r["chosen"], r["rejected"]) for r in rows] == [("good", "bad"), ("meh", "bad")]
    assert all(r["prompt"] == "P1" and r["split"] == "train" and r["persona"] == "Anchor" for r in rows)
    assert st.as_dict()["groups"] == 2 and st.invalid == 1 and st.pairs == 2
    assert st.as_dict()["mean_margin"] == pytest.approx((2.2 + 1.9) / 2)


def test_all_qualifying_pairs_are_kept() -> None:
    rows, st = build_pairs([{"candidates": list("abcd"), "scores": [1.0, 2.0, 3.0, 4.0]}], delta=0.5)
    assert st.pairs == len(rows) == 6  # every pair of a 4-candidate group differs by >= 1


def test_extra_pairs_from_the_annotation_tool(tmp_path: Path) -> None:
    f = tmp_path / "prefs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "User: I failed my test.", "chosen": "Anchor: That stings.", "rejected": "Anchor: ok"},
        {"prompt": "User: hi", "chosen": "same", "rejected": "same"},  # no preference -> skipped
    ]) + "\n")
    rows = load_extra_pairs(f)
    assert len(rows) == 1 and rows[0]["chosen"] == "Anchor: That stings." and rows[0]["split"] == "train"
    assert rows[0]["prompt"].startswith("Persona: ") and "User: I failed my test." in rows[0]["prompt"]


def test_extra_pairs_errors_name_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_extra_pairs(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "c"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: .*prompt, chosen and rejected"):
        load_extra_pairs(bad)


def test_warm_start_targets_rank_by_criterion(es_pack) -> None:
    from mascot.group.dialogue import Dialogue, Turn
    from mascot.train.stage1.data import sft_rows

    ctx = Dialogue([Turn("user", "I failed my test.")]).to_dict()
    groups = [{"group_id": "s1:anchor", "persona": "Anchor", "context": ctx, "directive": None}]
    judged = [{"group_id": "s1:anchor", "candidates": ["generic but fine", "I hear you, that stings.", ""],
               "scores": [3.8, 3.2, 5.0],
               "criteria": [{"consistency": 2.0}, {"consistency": 4.5}, {"consistency": 5.0}]}]
    by_name = {p.name: p for p in es_pack.personas}
    (row,) = sft_rows(groups, judged, by_name, es_pack.active)
    assert row["completion"][0]["content"] == "generic but fine"  # by aggregate; empty texts never chosen
    (row,) = sft_rows(groups, judged, by_name, es_pack.active, criterion="consistency")
    assert row["completion"][0]["content"] == "I hear you, that stings." and row["prompt"][0]["role"] == "system"
    assert sft_rows(groups, judged, by_name, es_pack.active, min_score=4.0) == []
    judged[0]["candidates"][0] = "That sounds really hard for you. It makes sense that you"
    (row,) = sft_rows(groups, judged, by_name, es_pack.active, trim=True)
    assert row["completion"][0]["content"] == "That sounds really hard for you."
    # max_words: the best target short enough (after trimming) wins; none short enough keeps the best overall
    (row,) = sft_rows(groups, judged, by_name, es_pack.active, trim=True, max_words=5)
    assert row["completion"][0]["content"] == "I hear you, that stings."
    (row,) = sft_rows(groups, judged, by_name, es_pack.active, trim=True, max_words=2)
    assert row["completion"][0]["content"] == "That sounds really hard for you."


def test_warm_start_targets_rank_by_weighted_criteria(es_pack) -> None:
    """Relevance counted twice picks the on-topic reply the plain aggregate passes over; an unknown
    criterion name fails with the valid ones."""
    from mascot.errors import ConfigError
    from mascot.group.dialogue import Dialogue, Turn
    from mascot.train.stage1.data import rank_score, sft_rows

    ctx = Dialogue([Turn("user", "I failed my test.")]).to_dict()
    groups = [{"group_id": "s1:anchor", "persona": "Anchor", "context": ctx, "directive": None}]
    judged = [{"group_id": "s1:anchor", "candidates": ["Warm words about nothing.", "Failing that test really stings."],
               "scores": [3.6, 3.4],
               "criteria": [{"relevance": 2.0, "empathy": 5.0, "consistency": 3.6},
                            {"relevance": 4.5, "empathy": 2.5, "consistency": 3.2}]}]
    by_name = {p.name: p for p in es_pack.personas}
    (row,) = sft_rows(groups, judged, by_name, es_pack.active)
    assert row["completion"][0]["content"] == "Warm words about nothing."
    weights = {"relevance": 2.0, "empathy": 1.0, "consistency": 1.0}
    (row,) = sft_rows(groups, judged, by_name, es_pack.active, weights=weights)
    assert row["completion"][0]["content"] == "Failing that test really stings."
    assert row["rank"] == pytest.approx((2 * 4.5 + 2.5 + 3.2) / 4) and row["score"] == 3.4
    assert rank_score(3.0, None, weights=weights) == 3.0  # no criteria recorded: the aggregate
    with pytest.raises(ConfigError, match="does not score"):
        rank_score(3.0, {"relevance": 4.0}, weights={"relevanse": 1.0})


def _judged(scenario: str, persona: str, texts: list[str], scores: list[float | None], split: str = "train",
            consistency: list[float] | None = None) -> dict:
    crit = [{"consistency": c} for c in consistency] if consistency else None
    return {"group_id": f"{scenario}:{persona.lower()}", "scenario_id": scenario, "persona": persona, "split": split,
            "candidates": texts, "scores": scores, "criteria": crit, "rm_prompt": f"prompt {scenario} {persona}"}


def test_cross_persona_pairs_reject_other_voices_on_the_same_scenario() -> None:
    from mascot.train.stage1.pairs import cross_persona_pairs

    groups = [
        _judged("s1", "Anchor", ["I hear how heavy this is for you.", "That sounds so hard to carry."], [3.0, 4.0],
                consistency=[5.0, 2.0]),
        _judged("s1", "Catalyst", ["What would you tell a friend in your place?",
                                   "What part of this feels the most uncertain right now for you today?"], [3.5, None]),
        _judged("s1", "Beacon", ["You already showed real courage here today.", "bad"], [4.0, 1.0]),
        _judged("s2", "Anchor", ["Another scenario entirely, not to be mixed."], [3.0], split="rm_eval"),
    ]
    rows = cross_persona_pairs(groups, per_group=1)
    anchor = [r for r in rows if r["persona"] == "Anchor"]
    # Anchor's most consistent reply (not its best aggregate) is chosen; each other persona gives one negative
    assert {r["rejected_persona"] for r in anchor} == {"Catalyst", "Beacon"}
    assert all(r["chosen"] == "I hear how heavy this is for you." for r in anchor)
    assert all(r["prompt"] == "prompt s1 Anchor" and r["source"] == "cross_persona" and r["split"] == "train" for r in anchor)
    # invalid verdicts and too-short texts are never used; the negative is the length-matched reply
    assert not any(r["rejected"] in ("bad",) or "uncertain" in r["rejected"] for r in rows)
    assert next(r for r in anchor if r["rejected_persona"] == "Beacon")["rejected"] == "You already showed real courage here today."
    # scenarios never mix: s2 has no other persona, so it forms no cross pair
    assert not any(r["group_id"].startswith("s2") for r in rows)
    # every persona of s1 gets negatives from the other two
    assert len(rows) == 6 and {r["persona"] for r in rows} == {"Anchor", "Catalyst", "Beacon"}
    assert len(cross_persona_pairs(groups, per_group=2)) == 6 + 2  # Anchor has a second usable reply; others not


def test_pair_guards_keep_persona_fit_and_length_in_check() -> None:
    g = _judged("s1", "Anchor", ["short one here", "a much much longer reply that goes on and on and on here",
                                 "mid length reply here"], [4.0, 3.0, 2.0], consistency=[2.0, 4.0, 1.0])
    plain, _ = build_pairs([g], delta=0.5)
    assert len(plain) == 3
    guarded, st = build_pairs([g], delta=0.5, criteria=["consistency"])
    # 0 beats 1 on the aggregate but is less persona-consistent: dropped
    assert [(p["chosen"][:5], p["rejected"][:5]) for p in guarded] == [("short", "mid l"), ("a muc", "mid l")]
    assert st.guarded == 1 and st.pairs == 2
    lengthy, st2 = build_pairs([g], delta=0.5, max_length_ratio=1.5)
    assert all(len(p["chosen"].split()) <= 1.5 * len(p["rejected"].split()) for p in lengthy) and st2.guarded == 1


def test_cross_persona_pairs_keep_only_what_the_judge_separates() -> None:
    from mascot.train.stage1.pairs import cross_persona_pairs, keep_persona_separated

    groups = [_judged("s1", "Anchor", ["I hear how heavy this is for you.", "That sounds so hard to carry."], [3.0, 4.0],
                      consistency=[5.0, 2.0]),
              _judged("s1", "Beacon", ["You already showed real courage here today.", "You are stronger than you know."],
                      [4.0, 3.0], consistency=[4.0, 4.0])]
    rows = cross_persona_pairs(groups, per_group=1, rejected_per_persona=2)
    assert len(rows) == 4 and sum(r["persona"] == "Anchor" for r in rows) == 2  # both Beacon replies for Anchor
    anchor = [r for r in rows if r["persona"] == "Anchor"]
    assert all(r["consistency_chosen"] == 5.0 for r in anchor)
    # the rejected replies judged *as Anchor*: one clearly off-voice (kept), one that fits Anchor too (dropped)
    scored = [{**anchor[0], "consistency_rejected": 2.0}, {**anchor[1], "consistency_rejected": 4.75}, {**anchor[1]}]
    kept = keep_persona_separated(scored, margin=0.5)
    assert len(kept) == 1 and kept[0]["gap"] == 3.0


def test_grpo_curve_checks_read_first_and_last_windows() -> None:
    """The GRPO curve checks (docs/training.md) from the logged history: reward rises, final clipped ratio <= 0.2 (the last
    window's mean reported beside it), format reward not falling."""
    from mascot.train.stage1.speakers import curve_checks, curve_summary

    hist = [{"reward": 0.1 * i, "completions/clipped_ratio": 0.5 if i < 25 else 0.0,
             "rewards/format_reward/mean": 0.4 + 0.01 * i, "loss": 0.0} for i in range(30)]
    checks = curve_checks(curve_summary(hist, window=10))
    assert checks["reward_rises"] and checks["clipped_ok"] and checks["format_not_falling"]
    assert checks["final_clipped_ratio"] == 0.0 and checks["last_window_clipped_ratio"] == 0.25
    hist[-1]["completions/clipped_ratio"] = 0.5
    hist[-1]["rewards/format_reward/mean"] = 0.0
    assert not curve_checks(curve_summary(hist, window=10))["clipped_ok"]
