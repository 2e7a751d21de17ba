"""Engine: adapters from checkpoints attach to the shared base, bad ones warn and fall back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mascot.backends.fake import FakeBackend
from mascot.backends.transformers_backend import TransformersBackend
from mascot.files.checkpoints import find_run, list_runs
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import load_pack
from tests.test_backends import make_lora


def _adapter_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    return path


def test_find_run_prefers_named_then_default_then_newest(tmp_path):
    assert find_run(tmp_path) is None
    _adapter_dir(tmp_path / "old" / "speakers" / "anchor")
    _adapter_dir(tmp_path / "tiny-cpu" / "speakers" / "anchor")
    assert find_run(tmp_path) == tmp_path / "tiny-cpu"
    assert find_run(tmp_path, "old") == tmp_path / "old"
    assert {p.name for p in list_runs(tmp_path)} == {"old", "tiny-cpu"}


def test_attach_adapters_loads_run_and_warns_on_bad_paths(tmp_path, tiny_model_dir):
    run = tmp_path / "run1"
    make_lora(tiny_model_dir, run / "speakers" / "anchor", seed=3)
    pack = load_pack("emotional-support").copy()
    pack.get("Beacon").adapter = str(tmp_path / "missing")
    backend = TransformersBackend(str(tiny_model_dir), dtype="float32")
    engine = Engine(EngineConfig(), backend, run_dir=run)
    warnings = engine.attach_adapters(pack)
    assert "speaker-anchor" in backend.adapters and "speaker-catalyst" not in backend.adapters
    assert len(warnings) == 1 and "Beacon" in warnings[0] and "does not exist" in warnings[0]
    assert engine.attach_adapters(pack) == []  # once per pack


def test_a_pack_takes_its_speakers_from_its_own_run(tmp_path):
    class Recording(FakeBackend):
        def add_adapter(self, name, path):
            self.adapters[name] = path

    _adapter_dir(tmp_path / "tiny-cpu" / "speakers" / "anchor")
    _adapter_dir(tmp_path / "tiny-cpu" / "director")
    _adapter_dir(tmp_path / "tiny-cpu-meeting" / "speakers" / "recorder")
    backend = Recording()
    engine = Engine(EngineConfig(backend="fake", checkpoints_dir=str(tmp_path)), backend, run_dir=tmp_path / "tiny-cpu")
    meeting = load_pack("meeting")
    assert meeting.speakers_run == "tiny-cpu-meeting"
    assert engine.attach_adapters(meeting) == []
    assert backend.adapters["speaker-recorder"] == str(tmp_path / "tiny-cpu-meeting" / "speakers" / "recorder")
    assert "speaker-decision-organizer" not in backend.adapters  # no adapter in that run: prompted, as before
    assert backend.adapters["director"] == str(tmp_path / "tiny-cpu" / "director")  # the director stays the chat's
    assert engine.attach_adapters(load_pack("emotional-support")) == []
    assert backend.adapters["speaker-anchor"] == str(tmp_path / "tiny-cpu" / "speakers" / "anchor")
    # a pack naming a run that is not there warns, and its personas run prompted
    other = load_pack("meeting").copy()
    other.name, other.speakers_run = "meeting-2", "gone"
    fresh = Engine(EngineConfig(backend="fake", checkpoints_dir=str(tmp_path)), Recording(), run_dir=tmp_path / "tiny-cpu")
    warnings = fresh.attach_adapters(other)
    assert len(warnings) == 1 and "'gone'" in warnings[0] and "prompted base model" in warnings[0]
    assert not any(k.startswith("speaker-") for k in fresh.backend.adapters)
    # a run chosen for the engine that has adapters for the pack's personas wins over the pack's own run
    _adapter_dir(tmp_path / "my-meeting-run" / "speakers" / "recorder")
    chosen = Engine(EngineConfig(backend="fake", checkpoints_dir=str(tmp_path)), Recording(),
                    run_dir=tmp_path / "my-meeting-run")
    assert chosen.attach_adapters(load_pack("meeting")) == []
    assert chosen.backend.adapters["speaker-recorder"] == str(tmp_path / "my-meeting-run" / "speakers" / "recorder")


def test_ill_fitting_adapter_warns_and_persona_runs_prompted(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))

    class Refusing(FakeBackend):
        def add_adapter(self, name, path):
            from mascot.errors import BackendError
            raise BackendError(f"Adapter {name!r} at {path} does not fit the loaded base model.")

    pack = load_pack("emotional-support").copy()
    pack.get("Anchor").adapter = str(bad)
    engine = Engine(EngineConfig(backend="fake"), Refusing())
    warnings = engine.attach_adapters(pack)
    assert warnings and "does not fit" in warnings[0] and "prompted base model" in warnings[0]
    turns = engine.group(pack.active, "round-robin").run(__import__("mascot.group.dialogue").group.dialogue.Dialogue(), "hi")
    assert turns[0].speaker == "Anchor" and "[base]" in turns[0].text


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mascot", "chat", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.model  # the CLI loads the shipped crisis classifiers
def test_cli_json_lines():
    r = _cli("--message", "I got the job!", "--backend", "fake", "--mode", "round-robin", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["speaker"] for x in rows] == ["Anchor", "Catalyst", "Beacon"]
    assert all(set(x) == {"speaker", "directive", "text"} and x["text"] for x in rows)


def test_cli_careful_replies_with_the_shipped_scorer():
    r = _cli("--message", "My dog died this morning.", "--backend", "fake", "--mode", "round-robin", "--json",
             "--replies", "careful", "--best-of", "2", "--stems")
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["speaker"] for line in r.stdout.splitlines()] == ["Anchor", "Catalyst", "Beacon"]
    r = _cli("--message", "hi", "--backend", "fake", "--replies", "careful", "--best-of", "9")
    assert r.returncode == 2 and "from 1 to 8" in r.stderr and "Traceback" not in r.stderr


def test_cli_errors_are_one_clear_line():
    r = _cli("--message", "hi", "--backend", "nope")
    assert r.returncode == 2 and "Valid backend names: auto, fake, llamacpp, openai, transformers, vllm" in r.stderr
    assert "Traceback" not in r.stderr
    r = _cli("--message", "hi", "--backend", "fake", "--mode", "chaos")
    assert r.returncode == 2 and "Valid director mode names" in r.stderr
    r = _cli("--message", " ", "--backend", "fake")
    assert r.returncode == 2 and "empty" in r.stderr


@pytest.mark.model
def test_cli_interactive_session():
    r = subprocess.run([sys.executable, "-m", "mascot", "chat", "--backend", "fake", "--mode", "round-robin"],
                       input="hello there\n\n/quit\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Anchor:" in r.stdout and "empty message" in r.stdout


def test_warm_up_primes_each_speaker_and_the_director_and_logs_nothing(monkeypatch, tmp_path):
    from mascot.safety.detector import CrisisDetector
    from mascot.safety.events import SafetyLog

    events = SafetyLog(tmp_path / "safety.db")
    backend = FakeBackend()
    pack = load_pack("emotional-support")
    engine = Engine(EngineConfig(backend="fake"), backend, safety=CrisisDetector(use_classifier=False, events=events))
    seconds = engine.warm_up(pack, "prompted")
    assert seconds >= 0
    primed = [c for c in backend.calls if c.params.max_new_tokens == 1]
    assert len(primed) == len(pack.active)  # one cached persona prompt per active speaker
    assert len({c.messages[0]["content"] for c in primed}) == len(pack.active)  # each persona's own prompt
    assert backend.score_calls  # the director scored its options once
    assert events.tier_counts("input") == {} and events.tier_counts("output") == {}
    assert engine._selector is None  # fast replies never load the acceptability scorer
    backend.calls.clear()
    engine.warm_up(pack, "prompted", replies="careful")
    assert engine._selector is not None and engine._selector[0] is not None  # careful replies: loaded at warm-up
    # careful replies draw in the batch context: each persona's prompt goes there as a batch of two
    primed = [c for c in backend.calls if c.params.max_new_tokens == 1]
    assert len(primed) == 2 * len(pack.active) and len({c.messages[0]["content"] for c in primed}) == len(pack.active)


def test_cli_no_adapters_asks_the_backend_for_no_persona_lora(monkeypatch, capsys):
    from mascot.__main__ import main as mascot_main
    from mascot.group.engine import Engine as CliEngine

    def refuse(self, persona, run_dir=None):  # type: ignore[no-untyped-def]
        raise AssertionError(f"--no-adapters asked the backend for {persona.name}'s adapter")

    monkeypatch.setattr(CliEngine, "attach_persona", refuse)
    rc = mascot_main(["chat", "--message", "I got the job!", "--backend", "fake", "--mode", "round-robin",
                      "--no-adapters", "--replies", "fast", "--json"])
    assert rc == 0
    assert [json.loads(line)["speaker"] for line in capsys.readouterr().out.splitlines()] == ["Anchor", "Catalyst", "Beacon"]


def test_the_shipped_meeting_speakers_load_for_the_meeting_pack():
    class Recording(FakeBackend):
        def add_adapter(self, name, path):
            self.adapters[name] = path

    engine = Engine(EngineConfig(backend="fake"), Recording(), run_dir=find_run("checkpoints"))
    assert engine.attach_adapters(load_pack("meeting")) == []
    for key in ("recorder", "decision-organizer", "action-item-proposer", "omission-checker"):
        assert Path(engine.backend.adapters[f"speaker-{key}"]) == Path("checkpoints/tiny-cpu-meeting/speakers") / key
    assert engine.fallbacks["meeting"] == []


class _Adapters(FakeBackend):
    """A fake backend that accepts adapters (records their folders) and can refuse one by name."""

    refuse: str = ""

    def add_adapter(self, name, path):
        if self.refuse and self.refuse in name:
            from mascot.errors import BackendError

            raise BackendError(f"{name} does not fit.")
        self.adapters[name] = path


def test_a_run_put_live_reaches_new_conversations_while_one_in_progress_keeps_its_adapters(tmp_path):
    import shutil

    from mascot.errors import ConfigError
    from mascot.group.dialogue import Dialogue

    pack = load_pack("emotional-support")
    engine = Engine(EngineConfig(backend="fake"), _Adapters(), run_dir=Path("checkpoints/tiny-cpu"))
    engine.attach_adapters(pack)
    before = engine.group(pack.active, "trained")  # a conversation already going
    new_run = tmp_path / "tiny-cpu-v2"
    shutil.copytree("checkpoints/tiny-cpu/speakers", new_run / "speakers")
    shutil.copytree("checkpoints/tiny-cpu/director", new_run / "director")
    live = engine.put_live(new_run)
    assert live.version == 1 and live.label == "tiny-cpu-v2 (v1)"
    assert live.names == {"anchor": "speaker-anchor@v1", "catalyst": "speaker-catalyst@v1",
                          "beacon": "speaker-beacon@v1", "director": "director@v1"}
    after = engine.group(pack.active, "trained")
    anchor = pack.get("Anchor")
    assert before.speaker.adapter_for(anchor) == "speaker-anchor" and after.speaker.adapter_for(anchor) == "speaker-anchor@v1"
    assert before.director.adapter == "director" and after.director.adapter == "director@v1"
    after.run(Dialogue(), "I got the job!")
    assert "speaker-anchor@v1" in {c.adapter for c in engine.backend.calls}  # the new run speaks
    pinned = engine.group(pack.active, "trained", version=0)  # a session started before keeps version 0
    assert pinned.speaker.adapter_for(anchor) == "speaker-anchor"
    speakers_only = tmp_path / "speakers-only"
    shutil.copytree("checkpoints/tiny-cpu/speakers", speakers_only / "speakers")
    v2 = engine.put_live(speakers_only)
    assert v2.names["anchor"] == "speaker-anchor@v2" and v2.names["director"] == "director@v1"  # kept from v1
    assert engine.roll_back().version == 1
    assert engine.roll_back().version == 0 and engine.group(pack.active, "trained").director.adapter == "director"
    with pytest.raises(ConfigError, match="Nothing to roll back"):
        engine.roll_back()
    with pytest.raises(ConfigError, match="No live version 7"):
        engine.group(pack.active, "trained", version=7)


def test_a_run_that_cannot_go_live_changes_nothing(tmp_path):
    import json
    import shutil

    from mascot.errors import ConfigError

    pack = load_pack("emotional-support")
    backend = _Adapters()
    engine = Engine(EngineConfig(backend="fake"), backend, run_dir=Path("checkpoints/tiny-cpu"))
    engine.attach_adapters(pack)
    loaded = dict(backend.adapters)
    with pytest.raises(ConfigError, match="holds no speaker or director adapter"):
        engine.put_live(tmp_path)
    other = tmp_path / "other-base"
    shutil.copytree("checkpoints/tiny-cpu/speakers", other / "speakers")
    cfg = other / "speakers" / "beacon" / "adapter_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "base_model_name_or_path": "Qwen/Qwen3-8B"}))
    with pytest.raises(ConfigError, match="Qwen/Qwen3-8B.*do not fit this model"):
        engine.put_live(other)
    good = tmp_path / "good"
    shutil.copytree("checkpoints/tiny-cpu/speakers", good / "speakers")
    backend.refuse = "beacon"  # one adapter fails to load: the ones loaded before it are removed again
    with pytest.raises(ConfigError, match="cannot go live: speaker-beacon@v1 does not fit"):
        engine.put_live(good)
    assert backend.adapters == loaded and engine.live.current.version == 0
