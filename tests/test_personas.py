from pathlib import Path

import pytest

from mascot.errors import PersonaError
from mascot.group.personas import list_packs, load_pack


def test_bundled_packs_load_with_expected_roles():
    assert {"emotional-support", "meeting"} <= set(list_packs())
    es = load_pack("emotional-support")
    assert [p.name for p in es.active] == ["Anchor", "Catalyst", "Beacon"]  # Action Guide is off by default
    assert es.get("Practical advisor").name == "Action Guide"
    assert es.get("listener").name == "Anchor" and es.get("Alice").name == "Anchor"
    meeting = load_pack("meeting")
    assert [p.name for p in meeting.active] == ["Recorder", "Decision Organizer", "Action-Item Proposer", "Omission Checker"]
    for p in es.personas + meeting.personas:
        assert p.goal and p.behaviours and p.avoid and p.style and p.examples and p.color.startswith("#")


def test_unknown_pack_lists_valid_names():
    with pytest.raises(PersonaError, match="emotional-support"):
        load_pack("nope")


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("name: x\npersonas:\n  - role: r\n    goal: g\n", "personas[0]: field 'name'"),
        ("name: x\npersonas:\n  - name: A\n    role: r\n    goal: g\n    behaviours: notalist\n", "'behaviours' must be a list"),
        ("name: x\npersonas:\n  - name: A\n    role: r\n    goal: g\n    colour: red\n", "unknown field(s) colour"),
        ("name: x\npersonas: []\n", "'personas' must be a non-empty list"),
        ("name: x\npersonas:\n  - name: A\n    role: r\n    goal: g\n  - name: a\n    role: r\n    goal: g\n", "appears twice"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_malformed_pack_names_file_and_field(tmp_path: Path, body: str, fragment: str):
    f = tmp_path / "bad.yaml"
    f.write_text(body)
    with pytest.raises(PersonaError) as exc:
        load_pack(f)
    assert str(f) in str(exc.value) and fragment in str(exc.value)


def test_session_copy_is_independent(es_pack):
    es_pack.personas[0].goal = "changed"
    assert load_pack("emotional-support").personas[0].goal != "changed"
