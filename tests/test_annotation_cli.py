"""CLI: `python -m annotation --db URL ...` end to end, and one-line user errors with exit code 2."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from annotation.cli import main
from tests.annotation_fixtures import pair_line, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def run(db: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--db", db, *args], out=out)
    return code, out.getvalue()


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'cli.db'}"


def paper_judgments(path: Path) -> Path:
    """200 judgments per baseline: MASCOT preferred 138 and 137 times (the paper's counts)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["item_id", "annotator", "choice"])
        for baseline, wins in (("Few-Shot CoT", 138), ("MultiAgentESC", 137)):
            for n in range(200):
                w.writerow([f"{baseline}-{n // 2}", f"ann{n % 2}", "MASCOT" if n < wins else baseline])
    return path


def test_full_cli_flow(db, tmp_path, capsys):
    assert run(db, "create-study", "--study", "ed", "--name", "ED study", "--completion-code", "OK1")[0] == 0
    pairs = [
        pair_line(f"{b}-{i}", "MASCOT", b) for b in ("Few-Shot CoT", "MultiAgentESC") for i in range(100)
    ]
    code, out = run(db, "import-pairs", str(write_jsonl(tmp_path / "pairs.jsonl", pairs)))
    assert code == 0 and "Imported 200 pairs into 'ed'" in out
    code, out = run(db, "import-judgments", str(paper_judgments(tmp_path / "j.csv")))
    assert code == 0 and "Imported 400 judgments" in out

    code, out = run(db, "stats", "--json", "--plot", str(tmp_path / "fig7.png"), "--bootstrap", "20")
    stats = json.loads(out)
    rows = {c["baseline"]: c for c in stats["comparisons"]}
    assert (rows["Few-Shot CoT"]["wins"], rows["MultiAgentESC"]["wins"]) == (138, 137)
    assert {c["stars"] for c in stats["comparisons"]} == {"***"}
    assert (tmp_path / "fig7.png").read_bytes()[:4] == b"\x89PNG"

    code, out = run(db, "stats")
    assert code == 0 and "MASCOT" in out and "***" in out and "Bradley-Terry" in out

    code, _ = run(db, "export", "--format", "csv", "-o", str(tmp_path / "j.csv"))
    exported = list(csv.DictReader(open(tmp_path / "j.csv")))
    assert code == 0 and len(exported) == 400 and exported[0]["winner"] == "MASCOT"
    code, _ = run(db, "export", "--format", "jsonl", "-o", str(tmp_path / "j.jsonl"))
    first = json.loads(open(tmp_path / "j.jsonl").readline())
    assert first["dialogue_a"][1]["speaker"] == "Listener" and first["study_id"] == "ed"

    code, _ = run(db, "export-preferences", "-o", str(tmp_path / "prefs.jsonl"))
    prefs = [json.loads(line) for line in open(tmp_path / "prefs.jsonl")]
    assert len(prefs) == 400 and set(prefs[0]) == {"prompt", "chosen", "rejected"}
    assert prefs[0]["chosen"].startswith("User: help") and "side-a reply" in prefs[0]["chosen"]

    code, out = run(db, "list-studies")
    assert out.startswith("ed\topen\t200/200 items complete\t400 judgments")
    assert run(db, "close")[0] == 0 and "closed" in run(db, "list-studies")[1]


def test_user_errors_are_one_line_with_exit_2(db, tmp_path, capsys):
    assert run(db, "stats")[0] == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Which study?") and err.count("\n") == 1
    run(db, "create-study", "--study", "s")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n', encoding="utf-8")
    assert run(db, "import-pairs", str(bad))[0] == 2
    assert "line 1: " in capsys.readouterr().err
    assert run(db, "import-pairs", str(tmp_path / "missing.jsonl"))[0] == 2
    assert "No such file" in capsys.readouterr().err
    assert run(db, "stats", "--study", "nope")[0] == 2
    assert "No study 'nope'" in capsys.readouterr().err


def test_module_entry_point_prints_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "annotation",
            "--db",
            f"sqlite:///{tmp_path / 'x.db'}",
            "create-study",
            "--study",
            "bad id",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: Invalid study id 'bad id'") and "Traceback" not in proc.stderr


def test_cli_export_neutralises_formulas_and_releases_annotators(db, tmp_path, capsys):
    from annotation.store import StudyStore

    run(db, "create-study", "--study", "inj")
    run(db, "import-pairs", str(write_jsonl(tmp_path / "p.jsonl", [pair_line("x1", "=SYS()", "+other")])))
    store = StudyStore(db)
    task = store.next_task(study_id="inj", annotator="@evil", session_key="browser-1")
    store.submit(token=task.token, choice="A", comment="-2+3")
    code, _ = run(db, "export", "--format", "csv", "-o", str(tmp_path / "out.csv"))
    row = next(csv.DictReader(open(tmp_path / "out.csv", encoding="utf-8")))
    assert code == 0 and (row["annotator"], row["comment"]) == ("'@evil", "'-2+3")
    assert {row["system_a"], row["system_b"]} == {"'=SYS()", "'+other"}
    code, out = run(db, "release-annotator", "@evil")
    assert code == 0 and "Released '@evil'" in out
    assert store.next_task(study_id="inj", annotator="@evil", session_key="browser-2")
    assert run(db, "release-annotator", "nobody")[0] == 2 and "No annotator 'nobody'" in capsys.readouterr().err
