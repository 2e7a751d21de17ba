"""Statistics: the paper's sign tests, Wilson, Holm, Bradley-Terry, agreement, ratings, chart."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, wilcoxon

from annotation.agreement import agreement_summary, cohen_kappa, krippendorff_alpha
from annotation.bradley_terry import bradley_terry
from annotation.frames import add_outcomes
from annotation.plots import save_preference_chart
from annotation.stats import holm, position_bias, sign_test, stars, study_stats, wilson_interval


def exact_two_sided_sign_p(wins: int, n: int) -> float:
    """Independent exact sign test: 2 * P(X >= max(w, n-w)) for X ~ Bin(n, 1/2), from integer sums."""
    k = max(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n)


@pytest.mark.parametrize("wins", [138, 137, 151])
def test_paper_counts_give_exact_sign_test_and_three_stars(wins):
    result = sign_test(wins, 200 - wins)
    assert result.p_value == pytest.approx(exact_two_sided_sign_p(wins, 200), rel=1e-9)
    assert result.stars == "***"
    assert result.win_rate == pytest.approx(wins / 200)
    assert result.ci_low < wins / 200 < result.ci_high


def test_paper_values_are_the_reported_magnitudes():
    # 138/200 = 69.0%, 137/200 = 68.5%, 151/200 = 75.5%; all far below 0.001.
    assert exact_two_sided_sign_p(138, 200) == pytest.approx(8.0269e-08, rel=1e-4)
    assert exact_two_sided_sign_p(137, 200) == pytest.approx(1.7903e-07, rel=1e-4)
    assert exact_two_sided_sign_p(151, 200) == pytest.approx(2.7443e-13, rel=1e-4)


def test_ties_are_excluded_and_ties_split_variant():
    t = sign_test(60, 40, ties=30, both_bad=11)
    assert t.p_value == pytest.approx(exact_two_sided_sign_p(60, 100))
    # 41 tie-like votes: 20 go to each side, one is dropped -> 80 of 140.
    assert t.p_ties_split == pytest.approx(exact_two_sided_sign_p(80, 140))
    assert t.n == 141 and t.win_rate == pytest.approx(0.6)


def test_stars_thresholds():
    assert [stars(p) for p in (0.2, 0.04, 0.009, 0.0009, None)] == ["", "*", "**", "***", ""]


def test_wilson_matches_scipy():
    for k, n in [(138, 200), (0, 10), (10, 10), (3, 7)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5]


def frame_from(rows):
    """rows: (item, annotator, system_a, system_b, choice, left_side)."""
    df = pd.DataFrame(rows, columns=["item_id", "annotator", "system_a", "system_b", "choice", "left_side"])
    df["judgment_id"] = range(1, len(df) + 1)
    for c in ("helpfulness", "emotional_appropriateness", "perceived_safety"):
        df[f"{c}_a"] = pd.array([None] * len(df), dtype="Int64")
        df[f"{c}_b"] = pd.array([None] * len(df), dtype="Int64")
    df["too_fast"] = False
    df["is_attention"] = False
    df["attention_passed"] = None
    df["seconds"] = 20.0
    return add_outcomes(df)


def paper_frame():
    """The paper's two comparisons: MASCOT preferred in 138/200 and 137/200 judgments."""
    rows = []
    for baseline, wins in (("Few-Shot CoT", 138), ("MultiAgentESC", 137)):
        for n in range(200):
            item = f"{baseline}-{n // 2}"
            rows.append(
                (item, f"ann{n % 2}", "MASCOT", baseline, "a" if n < wins else "b", "a" if n % 3 else "b")
            )
    return frame_from(rows)


def test_study_stats_on_the_paper_design():
    stats = study_stats(paper_frame(), bootstrap=50)
    table = stats.table()
    assert list(table.system) == ["MASCOT", "MASCOT"]
    assert list(table.wins) == [138, 137] and list(table.losses) == [62, 63]
    assert list(table.stars) == ["***", "***"] and list(table.stars_holm) == ["***", "***"]
    assert stats.bradley_terry[0].system == "MASCOT"
    top = stats.bradley_terry[0]
    assert top.ci_low < top.rating < top.ci_high
    d = stats.to_dict()
    assert d["comparisons"][0]["stars"] == "***" and d["agreement"]["items"] == 200


def test_holm_on_the_paper_design():
    table = study_stats(paper_frame(), bootstrap=0).table()
    p = [exact_two_sided_sign_p(138, 200), exact_two_sided_sign_p(137, 200)]
    assert table.p_holm.tolist() == pytest.approx([2 * p[0], p[1]], rel=1e-6)


def test_bradley_terry_recovers_known_strengths():
    rng = np.random.default_rng(1)
    true = {"A": 1.0, "B": 0.0, "C": -1.0}  # log-strengths
    rows = []
    for n in range(6000):
        x, y = rng.choice(list(true), size=2, replace=False)
        p = 1 / (1 + math.exp(true[y] - true[x]))
        rows.append((f"i{n}", "u", x, y, "a" if rng.random() < p else "b", None))
    ratings = {r.system: r for r in bradley_terry(frame_from(rows), bootstrap=100)}
    scale = 400 / math.log(10)
    assert [r.system for r in sorted(ratings.values(), key=lambda r: r.rank)] == ["A", "B", "C"]
    assert (ratings["A"].rating - ratings["C"].rating) / scale == pytest.approx(2.0, abs=0.15)
    assert ratings["A"].ci_low < ratings["A"].rating < ratings["A"].ci_high


def test_bradley_terry_two_systems_matches_closed_form():
    rows = [(f"i{n}", "u", "X", "Y", "a" if n < 30 else "b", None) for n in range(40)]
    r = {x.system: x.rating for x in bradley_terry(frame_from(rows), bootstrap=0)}
    # Two systems: strength ratio = (wins + prior) / (losses + prior).
    assert (r["X"] - r["Y"]) == pytest.approx(400 * math.log10(30.5 / 10.5), abs=0.02)  # ratings are rounded


def test_cohen_kappa_and_krippendorff_reference_values():
    assert cohen_kappa(list("aabb"), list("aaba")) == pytest.approx(0.5)
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability", the 4-coder 12-unit example.
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = [[c[u] for c in coders] for u in range(12)]
    assert krippendorff_alpha(units) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(units, level="interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha([[1, 1], [1, 1]]) is None


def test_agreement_summary_uses_item_orientation():
    rows = [
        ("i1", "u1", "X", "Y", "a", "a"),
        ("i1", "u2", "X", "Y", "a", "b"),
        ("i2", "u1", "X", "Y", "b", "a"),
        ("i2", "u2", "X", "Y", "a", "a"),
        ("i3", "u1", "X", "Y", "tie", "a"),
        ("i3", "u2", "X", "Y", "tie", "b"),
    ]
    summary = agreement_summary(frame_from(rows))
    assert summary["items"] == 3 and summary["percent_agreement"] == pytest.approx(2 / 3)
    assert summary["cohen_kappa"] == pytest.approx(cohen_kappa(["a", "b", "tie"], ["a", "a", "tie"]))
    assert summary["krippendorff_alpha"] == pytest.approx(
        krippendorff_alpha([["a", "a"], ["b", "a"], ["tie", "tie"]])
    )


def test_rating_wilcoxon_pairs_by_system():
    rows = [
        (f"i{n}", "u", "X", "Y", "a", "a") if n % 2 else (f"i{n}", "u", "Y", "X", "b", "a") for n in range(12)
    ]
    df = frame_from(rows)
    x_scores = [5, 4, 5, 4, 5, 3, 4, 5, 4, 5, 4, 4]
    y_scores = [3, 2, 4, 4, 2, 3, 1, 2, 3, 3, 2, 1]
    for n in range(12):  # put X's score on X's side, whichever side that is
        xs, ys = ("a", "b") if df.system_a[n] == "X" else ("b", "a")
        df.loc[n, f"helpfulness_{xs}"], df.loc[n, f"helpfulness_{ys}"] = x_scores[n], y_scores[n]
    (test,) = [r for r in study_stats(df, bootstrap=0).ratings if r.criterion == "helpfulness"]
    assert (test.system, test.n) == ("X", 12)
    assert test.mean_system == pytest.approx(np.mean(x_scores))
    assert test.p_value == pytest.approx(wilcoxon(x_scores, y_scores).pvalue)


def test_position_bias_and_exclusions():
    rows = [(f"i{n}", f"u{n % 3}", "X", "Y", "a", "a") for n in range(20)]
    df = frame_from(rows)
    bias = position_bias(df)
    assert bias["left_share"] == 1.0 and bias["p_value"] == pytest.approx(exact_two_sided_sign_p(20, 20))
    df.loc[:4, "too_fast"] = True
    assert study_stats(df, exclude_fast=True, bootstrap=0).comparisons[0].test.wins == 15


def test_min_attention_accuracy_drops_careless_annotators():
    rows = [(f"i{n}", "good" if n < 10 else "bad", "X", "Y", "a", "a") for n in range(20)]
    checks = [("c1", "good", "X", "Y", "a", "a"), ("c1", "bad", "X", "Y", "b", "a")]
    df = frame_from(rows + checks)
    df.loc[df.item_id == "c1", "is_attention"] = True
    df["attention_passed"] = [None] * 20 + [True, False]
    stats = study_stats(df, min_attention_accuracy=0.8, bootstrap=0)
    assert stats.comparisons[0].test.wins == 10
    assert stats.excluded["failed_attention_annotators"] == 1


def test_preference_chart_png(tmp_path):
    stats = study_stats(paper_frame(), bootstrap=0)
    path = save_preference_chart(stats.comparisons, tmp_path / "fig7.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    empty = save_preference_chart([], tmp_path / "empty.png")
    assert empty.read_bytes()[:4] == b"\x89PNG"


def test_stats_on_100k_judgments_is_fast():
    import time

    rng = np.random.default_rng(0)
    n = 100_000
    systems = np.array(["MASCOT", "CoT", "Zero", "SFT"])
    b = systems[rng.integers(1, 4, n)]
    df = frame_from(
        list(
            zip(
                [f"i{i // 2}" for i in range(n)],
                [f"u{i % 40}" for i in range(n)],
                ["MASCOT"] * n,
                b,
                rng.choice(["a", "b", "tie", "both_bad"], n, p=[0.6, 0.3, 0.07, 0.03]),
                rng.choice(["a", "b"], n),
            )
        )
    )
    start = time.perf_counter()
    stats = study_stats(df)
    assert time.perf_counter() - start < 2.0
    assert len(stats.comparisons) == 3


def test_fast_stats_frame_gives_the_same_statistics(tmp_path):
    """`for_stats` frames (categoricals from ids) and full frames (names) must agree exactly."""
    from annotation.frames import load_judgments
    from tests.annotation_fixtures import make_store, seed_study

    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=12, checks=1, attention_rate=0.2, annotators_per_item=2)
    choices = ["A", "B", "tie", "A", "both_bad", "A", "B"]
    for n, person in enumerate(["p1", "p2", "p3"]):
        step = 0
        while hasattr(task := store.next_task(study_id="s1", annotator=person), "token"):
            store.submit(token=task.token, choice=choices[(n + step) % len(choices)])
            step += 1
    full = study_stats(load_judgments(store, study_id="s1"), bootstrap=30)
    fast = study_stats(load_judgments(store, study_id="s1", for_stats=True), bootstrap=30)
    pd.testing.assert_frame_equal(full.table(), fast.table())
    assert full.bradley_terry == fast.bradley_terry
    assert full.agreement == fast.agreement and full.position_bias == fast.position_bias
    assert full.quality.to_dict() == fast.quality.to_dict()


def test_long_system_names_wrap_instead_of_squeezing_the_bars():
    from dataclasses import replace

    from annotation.plots import preference_figure

    stats = study_stats(paper_frame(), bootstrap=0)
    long = [replace(c, system="mascot+best3+stems:shipped@0.6 with the distilled speakers",
                    baseline="zero-shot-no-persona+best3@1.0 on the prompted base model") for c in stats.comparisons]
    short_ax, long_ax = preference_figure(stats.comparisons).axes[0], preference_figure(long).axes[0]
    assert long_ax.get_position().width > 0.8 * short_ax.get_position().width  # the bars keep their room
    assert all(len(line) <= 24 for t in long_ax.get_yticklabels() for line in t.get_text().splitlines())
