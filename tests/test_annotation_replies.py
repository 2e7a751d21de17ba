"""Single-reply labels: import of reply items and labels (all or nothing), one label from the app path,
exports, acceptability shares with Wilson intervals, agreement, the CLI, and the migration that adds them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from annotation.cli import main
from annotation.db import alembic_config, make_engine, migrate, writer
from annotation.errors import ImportValidationError, InvalidInput, StudyClosed
from annotation.reply_labels import ACCEPTABILITY, FAULTS, PERSONA_FIT
from annotation.reply_stats import acceptability_agreement, reply_label_summary, summarize_reply_labels
from annotation.reply_store import add_reply_label, import_reply_items, import_reply_labels, reply_label_rows
from annotation.schemas import StudyConfig
from annotation.store import StudyStore
from tests.annotation_fixtures import make_store, write_jsonl

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL


def reply_item(item_id: str, system: str = "MASCOT", reply: str | None = None, **extra: object) -> dict:
    row = {
        "id": item_id,
        "context": [
            {"speaker": "User", "text": f"I failed my exam ({item_id})."},
            {"speaker": "Mia", "text": "That sounds hard."},
        ],
        "persona": "Mia",
        "persona_role": "Listener",
        "reply": reply or f"What part worries you most? ({item_id})",
        "system": system,
    }
    row.update(extra)
    return row


def write_csv(path: Path, text_: str) -> Path:
    path.write_text(text_, encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path):
    s = make_store(tmp_path)
    s.create_study(config=StudyConfig(id="r1"))
    yield s
    s.close()


def seed_items(store: StudyStore, tmp_path: Path, n: int = 4) -> list[str]:
    rows = [reply_item(f"x{i}", "MASCOT" if i % 2 == 0 else "Baseline") for i in range(n)]
    import_reply_items(store, "r1", write_jsonl(tmp_path / "items.jsonl", rows))
    return [r["id"] for r in rows]


def run(db: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["--db", db, *args], out=out), out.getvalue()


def test_vocabularies_are_the_documented_ones():
    assert ACCEPTABILITY == ("acceptable", "borderline", "not_acceptable")
    assert PERSONA_FIT == ("fits", "partly", "off")
    assert set(FAULTS) == {"third_person", "own_life", "wrong_tone", "narration", "meta_talk", "unfinished", "copy",
                           "off_topic", "incoherent", "wrong_situation"}


def test_cli_round_trip_import_export_and_stats(tmp_path):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    assert run(db, "create-study", "--study", "rs")[0] == 0
    items = [reply_item(f"x{i}", "MASCOT" if i < 2 else "Baseline") for i in range(4)]
    code, out = run(db, "import-replies", str(write_jsonl(tmp_path / "items.jsonl", items)), "--study", "rs")
    assert code == 0 and "Imported 4 reply items into 'rs' (systems: Baseline, MASCOT)" in out
    labels = write_csv(
        tmp_path / "labels.csv",
        "id,annotator,acceptability,persona_fit,faults,comment\n"
        "x0,ann1,acceptable,fits,,fine\n"
        "x0,ann2,Not acceptable,off,third_person;own_life,\n"
        "x1,ann1,borderline,,wrong_tone,\n"
        "x2,ann1,acceptable,partly,,\n",
    )
    code, out = run(db, "import-reply-labels", str(labels), "--study", "rs")
    assert code == 0 and "Imported 4 reply labels" in out
    more = write_jsonl(tmp_path / "more.jsonl", [{"id": "x3", "annotator": "ann2", "acceptability": "not_acceptable",
                                                 "faults": ["meta_talk", "narration"], "comment": "robotic"}])
    assert run(db, "import-reply-labels", str(more), "--study", "rs")[0] == 0

    store = StudyStore(db)
    expected = reply_label_rows(store, "rs")
    store.close()
    assert list(expected.columns) == ["id", "system", "persona", "persona_role", "context", "reply", "meta", "annotator",
                                      "acceptability", "persona_fit", "faults", "comment", "created_at"]
    assert expected["acceptability"].tolist() == ["acceptable", "not_acceptable", "borderline", "acceptable",
                                                  "not_acceptable"]
    # faults are kept in vocabulary order whatever order they were given in
    assert expected["faults"].tolist() == [[], ["third_person", "own_life"], ["wrong_tone"], [], ["narration", "meta_talk"]]
    assert expected["persona_fit"].tolist() == ["fits", "off", None, "partly", None]

    assert run(db, "export-reply-labels", "--study", "rs", "-o", str(tmp_path / "out.csv"))[0] == 0
    assert run(db, "export-reply-labels", "--study", "rs", "--format", "jsonl", "-o", str(tmp_path / "out.jsonl"))[0] == 0
    from_csv = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    from_jsonl = pd.read_json(tmp_path / "out.jsonl", lines=True, dtype=False, convert_dates=False)
    for frame in (from_csv, from_jsonl):
        assert list(frame.columns) == list(expected.columns) and len(frame) == len(expected)
        assert frame["id"].tolist() == expected["id"].tolist()
        assert frame["annotator"].tolist() == expected["annotator"].tolist()
        assert frame["acceptability"].tolist() == expected["acceptability"].tolist()
        assert frame["comment"].tolist() == expected["comment"].tolist()
        assert frame["system"].tolist() == expected["system"].tolist()
    assert [json.loads(c) for c in from_csv["context"]] == expected["context"].tolist()
    assert [f.split(";") if f else [] for f in from_csv["faults"]] == expected["faults"].tolist()
    assert [p or None for p in from_csv["persona_fit"]] == expected["persona_fit"].tolist()
    assert from_jsonl["context"].tolist() == expected["context"].tolist()
    assert from_jsonl["faults"].tolist() == expected["faults"].tolist()
    assert [None if pd.isna(p) else p for p in from_jsonl["persona_fit"]] == expected["persona_fit"].tolist()

    # An exported file imports into another study holding the same items (its extra columns are read past).
    assert run(db, "create-study", "--study", "copy")[0] == 0
    assert run(db, "import-replies", str(tmp_path / "items.jsonl"), "--study", "copy")[0] == 0
    code, out = run(db, "import-reply-labels", str(tmp_path / "out.csv"), "--study", "copy")
    assert code == 0 and "Imported 5 reply labels" in out

    code, out = run(db, "reply-stats", "--study", "rs", "--json")
    summary = json.loads(out)
    by_system = {s["system"]: s for s in summary["systems"]}
    assert by_system["MASCOT"]["labels"] == 3 and by_system["MASCOT"]["acceptability"]["acceptable"]["count"] == 1
    assert by_system["Baseline"]["faults"]["meta_talk"] == 1
    assert summary["agreement"]["items"] == 1 and summary["agreement"]["percent_agreement"] == 0.0
    code, out = run(db, "reply-stats", "--study", "rs")
    assert code == 0 and "Acceptability per system" in out and "Agreement on acceptability" in out

    code, out = run(db, "list-studies")
    assert code == 0 and "rs\topen\t0/0 items complete\t0 judgments\trs\t4 reply items, 5 reply labels" in out
    code, out = run(db, "overview", "--study", "rs")
    overview = json.loads(out)
    assert (overview["items"], overview["reply_items"], overview["reply_labels"]) == (0, 4, 5)


def test_wilson_intervals_and_shares_on_a_hand_made_set(store, tmp_path):
    seed_items(store, tmp_path, n=4)  # x0, x2: MASCOT; x1, x3: Baseline
    for item, annotator, level in (("x0", "a", "acceptable"), ("x2", "a", "not_acceptable"),
                                   ("x1", "a", "borderline")):
        add_reply_label(store, study_id="r1", item_id=item, annotator=annotator, acceptability=level)
    summary = reply_label_summary(store, "r1")
    mascot, base = {s.system: s for s in summary.systems}["MASCOT"], {s.system: s for s in summary.systems}["Baseline"]
    assert (mascot.items, mascot.labels, base.items, base.labels, base.labelled_items) == (2, 2, 2, 1, 1)
    # Reference Wilson 95% intervals: 1/2 -> [0.0945, 0.9055]; 0/1 -> [0, 0.7935]; 1/1 -> [0.2065, 1].
    half = mascot.acceptability["acceptable"]
    assert half.count == 1 and half.share == 0.5
    assert half.low == pytest.approx(0.094531, abs=1e-5) and half.high == pytest.approx(0.905469, abs=1e-5)
    none = base.acceptability["acceptable"]
    assert none.share == 0.0 and none.low == 0.0 and none.high == pytest.approx(0.793451, abs=1e-5)
    full = base.acceptability["borderline"]
    assert full.share == 1.0 and full.low == pytest.approx(0.206549, abs=1e-5) and full.high == 1.0
    assert mascot.acceptability["borderline"].count == 0 and mascot.acceptability["not_acceptable"].share == 0.5
    assert summary.agreement["items"] == 0 and summary.agreement["cohen_kappa"] is None
    assert summary.table()["system"].tolist() == ["Baseline", "MASCOT"]
    json.dumps(summary.to_dict())  # JSON-ready


def test_agreement_and_kappa_on_a_known_set():
    # Four items, two annotators: 3 of 4 agree; kappa = (0.75 - 0.5) / (1 - 0.5) = 0.5.
    first = ["acceptable", "acceptable", "not_acceptable", "not_acceptable"]
    second = ["acceptable", "acceptable", "not_acceptable", "acceptable"]
    rows = []
    for n, (x, y) in enumerate(zip(first, second)):
        rows += [{"id": f"i{n}", "system": "S", "annotator": "a", "acceptability": x, "persona_fit": None, "faults": []},
                 {"id": f"i{n}", "system": "S", "annotator": "b", "acceptability": y, "persona_fit": None, "faults": []}]
    # A third label on i3 does not change the first-two statistics; a single-label item is left out.
    rows.append({"id": "i3", "system": "S", "annotator": "c", "acceptability": "borderline", "persona_fit": None,
                 "faults": []})
    rows.append({"id": "i9", "system": "S", "annotator": "a", "acceptability": "borderline", "persona_fit": None,
                 "faults": []})
    agreement = acceptability_agreement(pd.DataFrame(rows))
    assert agreement["items"] == 4
    assert agreement["percent_agreement"] == 0.75
    assert agreement["cohen_kappa"] == pytest.approx(0.5)
    assert agreement["krippendorff_alpha"] is not None
    summary = summarize_reply_labels(pd.DataFrame(rows), {"S": 5})
    assert summary.systems[0].labels == 10 and summary.systems[0].items == 5
    assert summary.agreement["cohen_kappa"] == pytest.approx(0.5)


def test_bad_item_row_imports_nothing_and_names_line_and_field(store, tmp_path):
    rows = [reply_item("ok1"), reply_item("ok2"), reply_item("bad", persona=""), reply_item("ok1")]
    rows[1]["context"] = [{"speaker": "User", "text": ""}]
    with pytest.raises(ImportValidationError) as err:
        import_reply_items(store, "r1", write_jsonl(tmp_path / "items.jsonl", rows))
    message = str(err.value)
    assert "nothing was imported" in message
    assert 'line 2: "context[0].text" must be non-empty text' in message
    assert 'line 3: "persona" must be non-empty text' in message
    assert "line 4: duplicate id 'ok1' (first on line 1)" in message
    assert store.overview(study_id="r1").reply_items == 0
    with pytest.raises(ImportValidationError, match=r"line 1: missing \['system'\]"):
        row = reply_item("x")
        del row["system"]
        import_reply_items(store, "r1", write_jsonl(tmp_path / "missing.jsonl", [row]))
    # Ids already in the study are refused too, again atomically.
    seed_items(store, tmp_path, n=2)
    with pytest.raises(ImportValidationError, match="id 'x1' is already in study 'r1'"):
        import_reply_items(store, "r1", write_jsonl(tmp_path / "again.jsonl", [reply_item("new"), reply_item("x1")]))
    assert store.overview(study_id="r1").reply_items == 2


def test_bad_label_row_imports_nothing_and_lists_valid_values(store, tmp_path):
    seed_items(store, tmp_path, n=2)
    labels = write_csv(
        tmp_path / "labels.csv",
        "id,annotator,acceptability,persona_fit,faults\n"
        "x0,ann1,acceptable,,\n"
        "x1,ann1,great,,\n"
        "x1,ann2,acceptable,sort of,\n"
        "x1,ann3,acceptable,,rude\n"
        "nope,ann1,acceptable,,\n",
    )
    with pytest.raises(ImportValidationError) as err:
        import_reply_labels(store, "r1", labels)
    message = str(err.value)
    assert "line 3: acceptability 'great' is not a valid value; use one of " \
           "['acceptable', 'borderline', 'not_acceptable']" in message
    assert "line 4: persona_fit 'sort of' is not a valid value; use one of ['fits', 'partly', 'off']" in message
    assert "line 5: fault 'rude' is not a valid value; use one of ['third_person'" in message
    assert "line 6: id 'nope' is not a reply item of study 'r1'" in message
    assert store.overview(study_id="r1").reply_labels == 0 and reply_label_rows(store, "r1").empty

    unknown = write_jsonl(tmp_path / "unknown.jsonl", [{"id": "x0", "annotator": "a", "acceptability": "acceptable",
                                                       "score": 3}])
    with pytest.raises(ImportValidationError, match=r"line 1: unknown keys \['score'\]"):
        import_reply_labels(store, "r1", unknown)
    header = write_csv(tmp_path / "header.csv", "id,who,acceptability\nx0,a,acceptable\n")
    with pytest.raises(ImportValidationError, match=r"header is missing \['annotator'\]"):
        import_reply_labels(store, "r1", header)


def test_second_label_by_the_same_annotator_is_refused(store, tmp_path):
    seed_items(store, tmp_path, n=2)
    twice = write_jsonl(tmp_path / "twice.jsonl", [
        {"id": "x0", "annotator": "ann1", "acceptability": "acceptable"},
        {"id": "x0", "annotator": "ann1", "acceptability": "borderline"},
    ])
    with pytest.raises(ImportValidationError, match="line 2: annotator 'ann1' already labelled item 'x0' "
                                                    r"\(on line 1\)"):
        import_reply_labels(store, "r1", twice)
    assert store.overview(study_id="r1").reply_labels == 0

    label_id = add_reply_label(store, study_id="r1", item_id="x0", annotator="ann1", acceptability="acceptable",
                               persona_fit="fits", faults=["unfinished"], comment="ok")
    assert label_id > 0
    with pytest.raises(InvalidInput, match="already labelled reply item 'x0'"):
        add_reply_label(store, study_id="r1", item_id="x0", annotator="ann1", acceptability="borderline")
    again = write_jsonl(tmp_path / "again.jsonl", [{"id": "x0", "annotator": "ann1", "acceptability": "acceptable"}])
    with pytest.raises(ImportValidationError, match=r"already labelled item 'x0' \(in the database\)"):
        import_reply_labels(store, "r1", again)
    rows = reply_label_rows(store, "r1")
    assert len(rows) == 1 and rows.iloc[0]["faults"] == ["unfinished"] and rows.iloc[0]["comment"] == "ok"


def test_add_reply_label_checks_values_item_and_study(store, tmp_path):
    seed_items(store, tmp_path, n=1)
    with pytest.raises(InvalidInput, match=r"use one of \['acceptable', 'borderline', 'not_acceptable'\]"):
        add_reply_label(store, study_id="r1", item_id="x0", annotator="a", acceptability="good")
    with pytest.raises(InvalidInput, match="fault 'typo'"):
        add_reply_label(store, study_id="r1", item_id="x0", annotator="a", acceptability="acceptable", faults=["typo"])
    with pytest.raises(InvalidInput, match="No reply item 'zz'"):
        add_reply_label(store, study_id="r1", item_id="zz", annotator="a", acceptability="acceptable")
    with pytest.raises(InvalidInput, match="Invalid annotator id"):
        add_reply_label(store, study_id="r1", item_id="x0", annotator=" ", acceptability="acceptable")
    store.set_open(study_id="r1", is_open=False)
    with pytest.raises(StudyClosed):
        add_reply_label(store, study_id="r1", item_id="x0", annotator="a", acceptability="acceptable")
    assert store.overview(study_id="r1").reply_labels == 0


def test_database_refuses_values_outside_the_vocabulary(store, tmp_path):
    seed_items(store, tmp_path, n=1)
    with pytest.raises(IntegrityError), writer(store.engine).begin() as conn:
        conn.execute(text(
            "INSERT INTO reply_labels (item_id, study_id, annotator, acceptability, faults, comment, source, "
            "created_at) VALUES (1, 'r1', 'a', 'great', '[]', '', 'app', '2025-01-01')"
        ))


def test_reply_names_of_systems_are_flagged(store, tmp_path):
    rows = [reply_item("x0", "MASCOT", reply="As MASCOT I think you will be fine."), reply_item("x1", "Baseline")]
    report = import_reply_items(store, "r1", write_jsonl(tmp_path / "items.jsonl", rows))
    assert report.added == 2 and report.leak_items == {"x0": ["MASCOT"]}
    assert any("name a system" in w for w in report.warnings)


def test_database_of_the_previous_head_upgrades_and_keeps_its_data(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    migrate(engine, "0003")
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO studies (id, name, instructions, annotators_per_item, attention_rate, min_seconds, "
            "hold_minutes, order_secret, is_open, created_at) VALUES "
            "('old', 'old', '', 2, 0, 0, 30, 'k', 1, '2025-01-01')"
        ))
    assert "reply_items" not in inspect(engine).get_table_names()
    engine.dispose()

    store = StudyStore(url)  # opening migrates to head
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head == "0005"
    assert {"reply_items", "reply_labels"} <= set(inspect(store.engine).get_table_names())
    assert store.get_study(study_id="old").name == "old"
    import_reply_items(store, "old", write_jsonl(tmp_path / "items.jsonl", [reply_item("x0")]))
    add_reply_label(store, study_id="old", item_id="x0", annotator="a", acceptability="borderline")
    assert store.overview(study_id="old").reply_labels == 1

    # And back down: the reply tables go, the rest stays.
    cfg = alembic_config()
    with writer(store.engine).connect() as conn, conn.begin():
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    assert "reply_items" not in inspect(store.engine).get_table_names()
    store.close()
