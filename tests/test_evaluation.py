"""Evaluation: metric math (0–100 mapping, mean ± std, distinct-n, BLEU/self-BLEU, embedding
redundancy), table aggregation, and whole eval runs on the FakeBackend writing JSON/CSV/Markdown."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mascot.__main__ import main as mascot_main
from mascot.backends.fake import FakeBackend
from mascot.errors import ConfigError
from mascot.evaluation import EvalConfig, run_eval
from mascot.evaluation.metrics import distinct_n, mean_pairwise_cosine, mean_std, self_bleu, sentence_bleu, to_100
from mascot.evaluation.report import OVERALL, score_table
from mascot.judges import Verdict

ED_HEADER = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags"


# ------------------------------------------------------------------------------ metrics
def test_score_mapping() -> None:
    assert [to_100(s) for s in (1, 2, 3, 4, 5)] == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert [to_100(s, "x20") for s in (1, 3, 5)] == [20.0, 60.0, 100.0]
    with pytest.raises(ConfigError, match="Valid score mapping names: linear, x20"):
        to_100(3, "percent")


def test_mean_std() -> None:
    ms = mean_std([50.0, 75.0, 100.0])
    assert ms["mean"] == 75.0 and ms["std"] == pytest.approx(25.0) and ms["n"] == 3  # sample std
    assert mean_std([60.0]) == {"mean": 60.0, "std": 0.0, "n": 1}
    assert mean_std([float("nan"), 10.0])["n"] == 1 and math.isnan(mean_std([])["mean"])


def test_distinct_n() -> None:
    assert distinct_n(["a b a b"], 1) == 0.5
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)
    assert distinct_n(["I hear you.", "I hear you."], 1) == 0.5  # pooled over the round
    assert distinct_n(["Hello"], 2) == 0.0 and distinct_n([], 1) == 0.0


def test_bleu_and_self_bleu() -> None:
    assert sentence_bleu("the cat is on the mat", ["the cat is on the mat"]) == pytest.approx(1.0)
    # hand-computed: p1=5/7, p2=3/6, p3=1/5, p4=0 -> 0.1/4 (method1), BP=1
    expected = (5 / 7 * 3 / 6 * 1 / 5 * 0.1 / 4) ** 0.25
    assert sentence_bleu("the cat sat on the mat today", ["the cat is on the mat"]) == pytest.approx(expected)
    # brevity penalty: shorter hypothesis than the closest reference
    assert sentence_bleu("the cat", ["the cat is on the mat"]) < 0.2
    same = ["That sounds so hard for you.", "That sounds so hard for you.", "That sounds so hard for you."]
    varied = ["That sounds so hard for you.", "What part hurt the most?", "You already showed real courage!"]
    assert self_bleu(same) == pytest.approx(1.0)
    assert self_bleu(varied) < 0.1
    assert self_bleu(["only one"]) is None


def test_mean_pairwise_cosine() -> None:
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert mean_pairwise_cosine(v) == pytest.approx((0 + 1 + 0) * 2 / 6)
    assert mean_pairwise_cosine(v[:1]) is None


def test_score_table_overall_averages_personas_per_round_then_rounds() -> None:
    def v(s: float) -> Verdict:
        return Verdict({"emotion": s, "empathy": s, "consistency": s, "relevance": s, "contribution": s}, True)

    records = [
        {"group": "positive", "verdicts": [("A", v(5)), ("B", v(3))]},  # round mean 4 -> 75
        {"group": "positive", "verdicts": [("A", v(1)), ("B", Verdict.invalid("bad"))]},  # invalid dropped -> 0
        {"group": "negative", "verdicts": [("A", v(2)), ("B", v(2))]},  # 25
    ]
    t = score_table(records, ["A", "B"], "linear")
    assert list(t) == ["positive", "negative", "all"]
    pos = t["positive"]
    assert pos[OVERALL]["overall"]["mean"] == pytest.approx(37.5) and pos[OVERALL]["overall"]["n"] == 2
    assert pos[OVERALL]["consistency"]["std"] == pytest.approx(np.std([75, 0], ddof=1))
    assert pos["A"]["emotion"]["mean"] == 50.0 and pos["B"]["emotion"]["n"] == 1
    assert t["all"][OVERALL]["overall"]["mean"] == pytest.approx((75 + 0 + 25) / 3)
    assert score_table(records, ["A", "B"], "x20")["negative"]["A"]["relevance"]["mean"] == 40.0


# ------------------------------------------------------------------------- whole runs
@pytest.fixture
def tiny_scenarios(tmp_path: Path) -> Path:
    f = tmp_path / "test.csv"
    f.write_text(ED_HEADER + "\n"
                 "c1,1,proud,I ran my first race.,1,I finished my first 10K today_comma_ I can't believe it!,,\n"
                 "c2,1,lonely,I moved to a new city.,1,I moved here a month ago and I still eat dinner alone every night.,,\n"
                 "c3,1,nostalgic,I found old photos.,1,Found a box of photos from my grandma's farm today.,,\n", encoding="utf-8")
    return f


def persona_responder():
    """Replies in the voice named by the system prompt, varied per call (so samples differ)."""
    counter = itertools.count()
    lines = {
        "Anchor": "That sounds really lonely, and it makes sense that you feel that way.",
        "Catalyst": "What part of it feels hardest when you think about it now?",
        "Beacon": "You've already shown so much courage, and that strength will carry you! 🌈",
    }

    def respond(messages, params, adapter):
        system = messages[0]["content"]
        who = next((n for n in lines if f"You are {n}" in system), None)
        n = next(counter)
        text = lines[who] if who else "I'm sorry to hear that. I hope things get better for you soon."
        return f"Thought: be kind.\nReply: {text} ({n})" if "Thought:" in system else f"{text} ({n})"

    return respond


def make_adapter(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")


def test_eval_run_end_to_end_on_fake_backend(tmp_path: Path, tiny_scenarios: Path) -> None:
    ckpt = tmp_path / "checkpoints"
    for p in ("anchor", "catalyst", "beacon"):
        make_adapter(ckpt / "tiny-cpu" / "speakers" / p)
    backend = FakeBackend(persona_responder())
    cfg = EvalConfig(
        systems=["mascot", "zero-shot", "few-shot-cot", "zero-shot-no-persona", "self-consistency", "sft"],
        scenarios=str(tiny_scenarios), checkpoints_dir=str(ckpt), output=str(tmp_path / "out"),
        batch_size=2, sc_samples=3, progress=False,
    )
    results = run_eval(cfg, backend=backend)
    systems = results["systems"]

    # The trained speakers ran through their adapters; the baselines on the base model.
    assert systems["mascot"]["status"] == "ok"
    mascot_adapters = {c.adapter for c in backend.calls[:9]}
    assert mascot_adapters == {"speaker-anchor", "speaker-catalyst", "speaker-beacon"}
    assert all(c.adapter is None for c in backend.calls[9:])
    assert systems["sft"]["status"] == "skipped" and "sft/<persona>" in systems["sft"]["reason"]

    # One round of all three personas per scenario, in pack order; CoT reasoning stripped.
    rounds = [json.loads(line) for line in Path(results["outputs"]["rounds"]).read_text().splitlines()]
    assert len(rounds) == 5 * 3
    fs = [r for r in rounds if r["system"] == "few-shot-cot"]
    assert [t["speaker"] for t in fs[0]["turns"]] == ["Anchor", "Catalyst", "Beacon"]
    assert not any("Thought" in t["text"] for r in fs for t in r["turns"])
    # Self-consistency sampled 3 candidates per persona turn and kept one of them.
    sc_calls = [c for c in backend.calls if "Thought:" in c.messages[0]["content"]]
    assert len(sc_calls) == 3 * 3 + 3 * 3 * 3  # few-shot-cot (1 per turn) + self-consistency (3 per turn)
    # No-persona: one assistant reply, judged in each persona's slot.
    npr = [r for r in rounds if r["system"] == "zero-shot-no-persona"][0]
    assert [t["speaker"] for t in npr["turns"]] == ["Assistant"] and len(npr["verdicts"]) == 3

    # Tables: groups by valence, per persona and Overall, 0–100.
    table = systems["few-shot-cot"]["table"]
    assert list(table) == ["positive", "negative", "neutral", "all"]
    overall = table["all"][OVERALL]
    assert overall["overall"]["n"] == 3 and 0 <= overall["overall"]["mean"] <= 100
    assert set(table["positive"]) == {"Anchor", "Catalyst", "Beacon", OVERALL}
    # In-persona replies beat the generic assistant on Consistency (offline judge).
    assert table["all"][OVERALL]["consistency"]["mean"] > systems["zero-shot-no-persona"]["table"]["all"][OVERALL]["consistency"]["mean"] + 20
    div = systems["zero-shot"]["diversity"]["all"]
    assert 0 < div["distinct_1"] <= 1 and div["self_bleu"] is not None and div["embed_sim"] is not None
    assert systems["zero-shot-no-persona"]["diversity"]["all"]["self_bleu"] is None
    # The shipped acceptability scorer's expected shares sit beside the judge's criteria, per persona and Overall.
    for row in (overall, table["all"]["Anchor"]):
        assert 0 <= row["acceptable"]["mean"] <= 100 and 0 <= row["unacceptable"]["mean"] <= 100
    assert {a["persona"] for a in fs[0]["acceptability"]} == {"Anchor", "Catalyst", "Beacon"}

    # Files: JSON, CSV and a Markdown table in the paper's layout.
    saved = json.loads(Path(results["outputs"]["json"]).read_text())
    assert saved["systems"]["sft"]["status"] == "skipped"
    rows = list(csv.DictReader(Path(results["outputs"]["csv"]).open()))
    assert {r["metric"] for r in rows} >= {"emotion", "empathy", "consistency", "relevance", "contribution", "overall", "self_bleu"}
    md = Path(results["outputs"]["markdown"]).read_text()
    assert "| System | Emotion | Empathy | Consistency | Relevance | Contribution | Overall | Acceptable % | Not acceptable % |" in md
    assert "### positive (1 scenarios)" in md and "| MASCOT |" in md and "SFT: skipped" in md


def test_eval_cli_with_fake_backend_and_errors(tmp_path: Path, tiny_scenarios: Path, capsys) -> None:
    out = tmp_path / "cli"
    rc = mascot_main(["eval", "--systems", "zero-shot,mascot", "--scenarios", str(tiny_scenarios), "--backend", "fake",
                      "--checkpoints-dir", str(tmp_path / "none"), "--limit", "1", "--output", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0 and "skipping mascot: no speakers adapters found" in printed and "| Zero-Shot |" in printed
    assert (out / "results.json").exists() and (out / "results.csv").exists() and (out / "results.md").exists()
    assert mascot_main(["eval", "--systems", "gpt5", "--backend", "fake"]) == 2
    assert "Valid systems: mascot" in capsys.readouterr().err
    assert mascot_main(["eval", "--systems", "zero-shot", "--pack", "meeting", "--scenarios", str(tiny_scenarios),
                        "--backend", "fake", "--output", str(out)]) == 2
    assert "holds no 'meeting' scenarios" in capsys.readouterr().err


def test_sft_adapters_route_through_their_own_names(tmp_path: Path, tiny_scenarios: Path) -> None:
    ckpt = tmp_path / "ck"
    make_adapter(ckpt / "r1" / "sft" / "anchor")
    backend = FakeBackend(persona_responder())
    results = run_eval(EvalConfig(systems=["sft"], scenarios=str(tiny_scenarios), checkpoints_dir=str(ckpt), run="r1",
                                  limit=1, output=str(tmp_path / "o"), progress=False), backend=backend)
    assert results["systems"]["sft"]["status"] == "ok"
    assert "no adapter for Catalyst, Beacon" in results["systems"]["sft"]["notes"][0]
    assert {c.adapter for c in backend.calls} == {"sft-anchor", None}


@pytest.mark.model
@pytest.mark.parametrize("backend", ["transformers", "llamacpp"])
def test_eval_on_the_embedded_model(tmp_path: Path, tiny_scenarios: Path, backend: str) -> None:
    """The real path: SmolLM2-135M through each CPU backend, offline judge, one scenario per valence."""
    results = run_eval(EvalConfig(systems=["zero-shot", "few-shot"], scenarios=str(tiny_scenarios), backend=backend,
                                  max_new_tokens=24, output=str(tmp_path / "real"), progress=False))
    for name in ("zero-shot", "few-shot"):
        s = results["systems"][name]
        assert s["status"] == "ok" and s["n_rounds"] == 3 and s["invalid"] == 0
        assert 0 <= s["table"]["all"][OVERALL]["overall"]["mean"] <= 100
    rounds = [json.loads(x) for x in Path(results["outputs"]["rounds"]).read_text().splitlines()]
    assert all(t["text"].strip() for r in rounds for t in r["turns"])


def test_persona_identifiability_separable_and_shuffled() -> None:
    from mascot.evaluation.metrics import persona_identifiability

    rng = np.random.default_rng(0)
    personas = ["Anchor", "Catalyst", "Beacon"]
    centres = np.eye(3, 16) * 3.0
    scen, who, vecs = [], [], []
    for s in range(40):
        for k, p in enumerate(personas):
            scen.append(f"s{s}")
            who.append(p)
            v = centres[k] + rng.normal(scale=0.3, size=16)
            vecs.append(v / np.linalg.norm(v))
    vecs = np.array(vecs)
    sep = persona_identifiability(scen, who, vecs)
    assert sep["accuracy"] == 1.0 and sep["n"] == 120 and sep["chance"] == pytest.approx(1 / 3)
    # the same texts with persona labels shuffled: nothing to learn, accuracy near chance
    accs = [persona_identifiability(scen, list(rng.permutation(who)), vecs)["accuracy"] for _ in range(20)]
    assert abs(float(np.mean(accs)) - 1 / 3) < 0.08
    assert persona_identifiability(["s1"], ["A"], vecs[:1])["accuracy"] is None


def test_paired_test_and_merge(tmp_path: Path) -> None:
    import json

    from mascot.evaluation.metrics import paired_test
    from mascot.evaluation.runner import merge_results

    a = {f"s{i}": 50.0 + i % 3 + 2 for i in range(20)}
    b = {f"s{i}": 50.0 + i % 3 for i in range(20)}
    t = paired_test(a, b)
    assert t["n"] == 20 and t["mean_diff"] == 2.0 and t["p"] < 0.001
    assert paired_test(a, a)["p"] is None and paired_test({}, b)["n"] == 0
    base = {"config": {"scenarios": "x", "pack": "emotional-support"}, "n_scenarios": 20, "judge": "j", "mapping": "linear",
            "personas": ["Anchor"], "backend": "m"}
    for name, scores in (("one", a), ("two", b)):
        d = tmp_path / name
        d.mkdir()
        entry = {"label": name, "status": "ok", "notes": [], "invalid": 0, "table": {}, "diversity": {},
                 "identifiability": {"accuracy": 0.5, "n": 20, "chance": 0.5},
                 "per_scenario": {k: {"overall": v, "consistency": v, "relevance": v} for k, v in scores.items()}}
        (d / "results.json").write_text(json.dumps({**base, "systems": {name: entry}}))
    merged = merge_results([str(tmp_path / "one"), str(tmp_path / "two")], str(tmp_path / "out"))
    assert merged["paired"]["one vs two"]["overall"]["mean_diff"] == 2.0
    text = (tmp_path / "out" / "results.md").read_text()
    assert "Paired tests" in text and "identifiability" in text


def test_repeats_give_each_scenario_several_seeded_rounds_and_average_them(tmp_path: Path, tiny_scenarios: Path) -> None:
    """--repeats 2: two rounds per scenario with seeds 0 and 1 (different samples), the tables count both, and
    the paired tests compare each scenario's mean of its two rounds."""
    backend = FakeBackend(lambda m, p, a: f"Round {p.seed % 2}: I hear you, that sounds hard to carry. " +
                          ("You are brave." if p.seed % 2 else ""))
    cfg = EvalConfig(systems=["zero-shot", "few-shot"], scenarios=str(tiny_scenarios), output=str(tmp_path / "out"),
                     repeats=2, progress=False)
    results = run_eval(cfg, backend=backend)
    rounds = [json.loads(line) for line in Path(results["outputs"]["rounds"]).read_text().splitlines()]
    zs = [r for r in rounds if r["system"] == "zero-shot"]
    assert len(zs) == 2 * results["n_scenarios"] and {r["seed"] for r in zs} == {0, 1}
    assert results["systems"]["zero-shot"]["table"]["all"][OVERALL]["n_rounds"] == 2 * results["n_scenarios"]
    per = results["systems"]["zero-shot"]["per_scenario"]
    assert len(per) == results["n_scenarios"]
    one = [r for r in zs if r["scenario"] == zs[0]["scenario"]]
    assert len(one) == 2 and one[0]["turns"] != one[1]["turns"]
    by_round = [sum(to_100(v["scores"]["consistency"], "linear") for v in r["verdicts"]) / len(r["verdicts"]) for r in one]
    assert by_round[0] != by_round[1]
    assert per[zs[0]["scenario"]]["consistency"] == pytest.approx(sum(by_round) / 2, abs=1e-2)
    assert "2 rounds of Anchor" in Path(results["outputs"]["markdown"]).read_text()
    with pytest.raises(ConfigError, match="repeats"):
        EvalConfig(systems=["zero-shot"], repeats=0)
