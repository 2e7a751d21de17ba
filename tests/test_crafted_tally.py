"""The crafted-request tally counts per kind and per server mode."""

from __future__ import annotations

from tests.crafted import Tally


def test_tally_counts_per_kind_and_per_mode(tmp_path, monkeypatch):
    t = Tally()
    t.mode = "default"
    assert t.record("file read", True) and not t.record("file read", False)
    t.mode = "auth"
    t.record("login", True)
    s = t.summary()
    assert (s["tried"], s["refused"]) == (3, 2)
    assert s["by_mode"] == {"auth": {"tried": 1, "refused": 1}, "default": {"tried": 2, "refused": 1}}
    assert s["by_kind"]["file read"] == {"tried": 2, "refused": 1}
    out = tmp_path / "crafted.json"
    monkeypatch.setenv("MASCOT_CRAFTED_REPORT", str(out))
    t.write()
    assert '"by_mode"' in out.read_text()
