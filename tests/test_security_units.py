"""Unit tests of the hardening pieces: path confinement, admin logins, the login limiter, CSV cells,
/chat input checks, annotator session keys, completion codes, size limits, per-session state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gradio as gr
import pytest

from annotation.errors import AnnotatorInUse, InvalidInput
from annotation.exporting import csv_safe
from annotation.quality import API_SPEED_SECONDS
from annotation.schemas import Finished, StudyConfig, Task
from app.admin_auth import AdminAuthError, add_user, admin_checker, hash_password, read_users, verify_password
from app.chat_tab import ChatHandlers
from app.public_input import clean_history, load_public_pack
from app.security import LoginLimiter, private_paths
from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.errors import MascotError
from mascot.files.safe_paths import PathNotAllowed, resolve_inside
from mascot.group.engine import Engine, EngineConfig
from tests.annotation_fixtures import FakeClock, make_store, seed_study


# ----------------------------------------------------------------------------- paths
def test_resolve_inside_refuses_dotdot_outside_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)
    assert resolve_inside("checkpoints/run1", [root], base=tmp_path) == root / "run1"
    with pytest.raises(PathNotAllowed, match="climbs out with `..`"):
        resolve_inside("checkpoints/../../x", [root], base=tmp_path, what="output folder")
    with pytest.raises(PathNotAllowed, match="is outside them"):
        resolve_inside("/etc/run", [root], base=tmp_path)
    with pytest.raises(PathNotAllowed, match="symbolic link"):
        resolve_inside("checkpoints/escape/run", [root], base=tmp_path)
    with pytest.raises(PathNotAllowed, match="NUL"):
        resolve_inside("checkpoints/a\x00b", [root], base=tmp_path)


def test_private_paths_cover_data_checkpoints_and_project(tmp_path: Path) -> None:
    s = Settings(data_dir=str(tmp_path / "data"), checkpoints_dir=str(tmp_path / "ck"), runs_dir=str(tmp_path / "runs"))
    blocked = private_paths(s)
    for p in (tmp_path / "data", tmp_path / "ck", tmp_path / "runs", Path(__file__).resolve().parents[1]):
        assert str(p.resolve()) in blocked
    assert str(Path(gr.utils.get_upload_folder()).resolve()) not in blocked


def test_train_tab_confines_output_and_recipe(tmp_path: Path) -> None:
    from app.admin_tab import check_recipe, confined_output

    s = Settings(checkpoints_dir=str(tmp_path / "checkpoints"), runs_dir=str(tmp_path / "runs"), data_dir=str(tmp_path))
    assert confined_output("tiny-cpu", str(tmp_path / "runs" / "r1"), {}, s) == tmp_path / "runs" / "r1"
    assert confined_output("tiny-cpu", "", {}, s).parent == (tmp_path / "checkpoints").resolve()
    for out, ov in (("/tmp/elsewhere", {}), (str(tmp_path / "checkpoints" / ".." / "x"), {}),
                    ("", {"output_dir": "/etc/x"}), ("", {"checkpoints_dir": str(tmp_path)})):
        with pytest.raises(MascotError, match="refused"):
            confined_output("tiny-cpu", out, ov, s)
    assert check_recipe("tiny-cpu", s) == "tiny-cpu"
    with pytest.raises(MascotError, match="recipe file '/etc/passwd.yaml' is refused"):
        check_recipe("/etc/passwd.yaml", s)


# ----------------------------------------------------------------------------- logins
def test_password_hashes_are_salted_and_verified() -> None:
    a, b = hash_password("s3cret-pass"), hash_password("s3cret-pass")
    assert a != b and a.startswith("scrypt$")
    assert verify_password("s3cret-pass", a) and not verify_password("wrong", a)
    assert not verify_password("s3cret-pass", "garbage")


def test_users_file_and_checker(tmp_path: Path) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    users = tmp_path / "users.txt"
    add_user(users, "ada", "analytical-1")
    add_user(users, "bob", "bobs-password")
    add_user(users, "ada", "new-password-2")  # replaced, not duplicated
    assert sorted(read_users(users)) == ["ada", "bob"] and oct(users.stat().st_mode)[-3:] == "600"
    assert "new-password-2" not in users.read_text()
    check = admin_checker(Settings(admin_users_file=str(users)))
    assert check is not None
    def run(coro):  # in a thread of its own: a session-wide browser fixture may hold this thread's event loop
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()

    assert run(check("ada", "new-password-2")) and not run(check("ada", "analytical-1"))
    assert not run(check("eve", "new-password-2"))
    assert admin_checker(Settings()) is None  # nothing configured: the admin app is disabled
    with pytest.raises(AdminAuthError, match="at least 8"):
        admin_checker(Settings(admin_password="short"))
    users.write_text("ada:plain-text-password\n")
    with pytest.raises(AdminAuthError, match="line 1"):
        read_users(users)


def test_login_limiter_window() -> None:
    now = [0.0]
    limiter = LoginLimiter(max_failures=3, window_s=60, clock=lambda: now[0])
    key = ("1.2.3.4", "/admin/login")
    for _ in range(3):
        assert limiter.retry_after(key) == 0
        limiter.failed(key)
    assert limiter.retry_after(key) == 60
    assert limiter.retry_after(("5.6.7.8", "/admin/login")) == 0  # other addresses unaffected
    now[0] = 61
    assert limiter.retry_after(key) == 0


def test_login_limiter_forgets_keys_whose_failures_expired() -> None:
    now = [0.0]
    limiter = LoginLimiter(max_failures=3, window_s=60, clock=lambda: now[0])
    for n in range(10_001):
        limiter.failed((f"10.0.{n // 256}.{n % 256}", "/login"))
    now[0] = 61
    limiter.failed(("192.0.2.1", "/login"))
    assert len(limiter._failures) == 1  # the expired addresses went, however many there were


# ----------------------------------------------------------------------------- exports and chat input
@pytest.mark.parametrize("cell", ["=1+2", "+SUM(A1)", "-2+3", "@cmd", "\tx", "\rx"])
def test_formula_cells_get_an_apostrophe(cell: str) -> None:
    assert csv_safe(cell) == "'" + cell
    assert csv_safe("plain") == "plain" and csv_safe(-1.5) == -1.5 and csv_safe(None) is None


def test_chat_history_is_checked_and_stripped() -> None:
    turns = clean_history([{"speaker": "user", "text": "hi", "meta": {"f": {"path": "/etc/passwd"}, "n": 1}},
                           {"speaker": "Anchor", "text": "hey", "directive": {"speaker": "Anchor", "action": "a"}}],
                          max_turns=5, max_chars=100)
    assert turns[0].meta == {"n": 1} and turns[1].directive.speaker == "Anchor"
    for history, fragment in (([{"speaker": "user", "text": "x" * 101}], "limit is 100"),
                              ([{"speaker": "user", "text": "x"}] * 6, "limit is 5"),
                              ("not a list", "must be a list"), ([{"speaker": 1, "text": "x"}], "must be a string")):
        with pytest.raises(MascotError, match=fragment):
            clean_history(history, max_turns=5, max_chars=100)


def test_public_packs_are_names_only(tmp_path: Path) -> None:
    assert load_public_pack("meeting").name == "meeting"
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: evil\npersonas: [{name: Eve, role: r, goal: g}]\n")
    for bad in (str(evil), "../packs/meeting", "meeting.yaml", None, "x" * 500):
        with pytest.raises(MascotError, match="Unknown persona pack"):
            load_public_pack(bad)


def test_operator_registered_pack_is_public_by_name_only(tmp_path: Path) -> None:
    own = tmp_path / "club.yaml"
    own.write_text("name: club\npersonas: [{name: Host, role: host, goal: welcome people}]\n")
    engine = Engine(EngineConfig(backend="fake"), FakeBackend())
    h = ChatHandlers(engine, Settings(data_dir=str(tmp_path), backend="fake", pack=str(own)))
    assert h.new_session().pack.name == "club" and h.new_session("club").pack.name == "club"
    assert h.api_chat("hi", [], "club", "round-robin", 1, 0)[1]["speaker"] == "Host"
    with pytest.raises(gr.Error, match="Unknown persona pack"):
        h.api_chat("hi", [], str(own), "round-robin", 1, 0)


def test_persona_edits_and_warnings_stay_in_their_session(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(backend="fake"), FakeBackend())
    h = ChatHandlers(engine, Settings(data_dir=str(tmp_path), backend="fake"))
    mine, theirs = h.new_session(), h.new_session()
    fields = h.persona_fields("Anchor", mine)
    mine, *_ = h.save_persona("Anchor", "Anchor", "[click](http://evil)", *fields[2:], False, mine)
    assert "evil" not in h.status(theirs) and theirs.pack.get("Anchor").role != "[click](http://evil)"
    engine.fallbacks["emotional-support"] = ["Beacon"]
    status = h.status(theirs)
    assert "Beacon" in status and "/" not in status.split("Beacon", 1)[1].split("(details")[0]


def test_annotation_cli_no_longer_imports_the_app() -> None:
    code = "import sys, annotation.cli; print('app.settings' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------------------- annotators
def test_annotator_id_is_bound_to_the_first_session_key(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=2)
    first = store.next_task(study_id="s1", annotator="P1", session_key="key-one")
    assert isinstance(first, Task)
    assert store.next_task(study_id="s1", annotator="P1", session_key="key-one").token == first.token
    with pytest.raises(AnnotatorInUse, match="already in use in another browser.*ask the study owner to release"):
        store.next_task(study_id="s1", annotator="P1", session_key="key-two")
    assert store.release_annotator(study_id="s1", annotator="P1")
    assert isinstance(store.next_task(study_id="s1", annotator="P1", session_key="key-two"), Task)
    assert not store.release_annotator(study_id="s1", annotator="nobody")


@pytest.mark.parametrize("bad", ["P\x00X", "tab\there", "x" * 201, "", "   "])
def test_annotator_ids_must_be_printable(tmp_path: Path, bad: str) -> None:
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    with pytest.raises(InvalidInput, match="Invalid annotator id"):
        store.next_task(study_id="s1", annotator=bad)


def test_completion_code_only_after_work_and_api_speed_flag(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    store.create_study(config=StudyConfig(id="none", completion_code="NO-WORK"))  # no items at all
    done = store.next_task(study_id="none", annotator="P1")
    assert isinstance(done, Finished) and done.completion_code is None
    seed_study(store, tmp_path, n_items=2, completion_code="WORKED")
    task = store.next_task(study_id="s1", annotator="P1")
    clock.advance(seconds=API_SPEED_SECONDS / 2)
    assert store.submit(token=task.token, choice="A").too_fast, "a vote at API speed is flagged"
    task = store.next_task(study_id="s1", annotator="P1")
    clock.advance(seconds=20)
    assert not store.submit(token=task.token, choice="B").too_fast
    finished = store.next_task(study_id="s1", annotator="P1")
    assert isinstance(finished, Finished) and finished.completion_code == "WORKED"


def test_comment_size_is_limited(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    task = store.next_task(study_id="s1", annotator="P1")
    with pytest.raises(InvalidInput, match="2,000"):
        store.submit(token=task.token, choice="A", comment="c" * 5_000_000)
    with pytest.raises(InvalidInput, match="NUL"):
        store.submit(token=task.token, choice="A", comment="a\x00b")
    assert store.submit(token=task.token, choice="A", comment="fine").judgment_id
