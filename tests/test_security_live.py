"""Crafted requests against a live server in each mode, as an attacker would send them (raw HTTP).

Modes: `default` (public chat, annotators, /admin with MASCOT_ADMIN_PASSWORD), `auth` (the optional
chat login on), `annotate-only`, and `admin-off` (no admin login configured). Covered: every endpoint
without and with wrong credentials; the FileData file read through every input of every event; path
traversal; the annotator-identity race; completion codes without work; spreadsheet-formula cells;
oversize payloads. Every crafted request is tallied (tests/crafted.py); all must be refused.
Run with `MASCOT_CRAFTED_REPORT=FILE` to write the counts the README reports.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from gradio import utils as gr_utils

from annotation.importing import import_pairs
from annotation.quality import API_SPEED_SECONDS
from annotation.schemas import StudyConfig
from annotation.store import StudyStore
from app.security import admin_files
from app.server import build_server
from app.settings import Settings
from mascot.backends.fake import FakeBackend, echo_responder
from mascot.group.engine import Engine, EngineConfig
from tests.annotation_fixtures import pair_line, seed_study, write_jsonl
from tests.conftest import free_port, run_uvicorn
from tests.crafted import TALLY, GradioApp, component_types, dependencies, filedata, served_paths

ADMIN_PASSWORD = "correct-horse-battery"
CHAT_AUTH = ("friend", "chat-pass-77")
CANARY_TEXT = f"CANARY-{secrets.token_hex(8)}"
STATEFUL = {"state"}  # server-side values: whatever a client sends for them is ignored


# ----------------------------------------------------------------------------- live servers
class Live:
    """One running server: its base URL, settings, store and the files an attacker wants."""

    def __init__(self, mode: str, root: Path) -> None:
        self.mode = mode
        self.root = root
        data = root / "data"
        data.mkdir(parents=True)
        (root / "checkpoints").mkdir()
        self.settings = Settings(
            data_dir=str(data), backend="fake", mode="round-robin", checkpoints_dir=str(root / "checkpoints"),
            runs_dir=str(root / "runs"), annotate_only=mode == "annotate-only",
            auth=":".join(CHAT_AUTH) if mode == "auth" else "",
            admin_password=ADMIN_PASSWORD if mode != "admin-off" else "",
            max_upload_mb=2,
        )
        self.store = StudyStore(self.settings.annotation_db_url)
        seed_study(self.store, root, study_id="s1", n_items=3, completion_code="CODE-S1", annotators_per_item=3)
        seed_study(self.store, root, study_id="starve", n_items=2, completion_code="CODE-STARVE", annotators_per_item=1)
        self.store.create_study(config=StudyConfig(id="empty", completion_code="CODE-EMPTY"))  # no items
        rows = [pair_line(f"x{n}", a="@SUM(A1)", b="=cmd|' /C calc'!A0") for n in range(2)]
        self.store.create_study(config=StudyConfig(id="inj"))
        import_pairs(self.store, study_id="inj", path=write_jsonl(root / "inj.jsonl", rows))
        self.port = free_port()
        backend = FakeBackend(responder=slow_on_request)
        self.server, _ = run_uvicorn(build_server(self.settings, Engine(EngineConfig(backend="fake"), backend)),
                                     self.port)
        self.base = f"http://127.0.0.1:{self.port}"
        self.db_path = data / "annotation.db"

    def app(self, path: str = "") -> GradioApp:
        return GradioApp(self.base + path)

    def admin(self) -> GradioApp:
        a = self.app("/admin")
        assert a.login("admin", ADMIN_PASSWORD).status_code == 200
        return a

    def chat(self) -> GradioApp:
        a = self.app("")
        if self.mode == "auth":
            assert a.login(*CHAT_AUTH).status_code == 200
        return a

    def judgments(self, annotator: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db_path) as con:
            return con.execute(
                "SELECT j.comment, j.too_fast, j.seconds FROM judgments j JOIN annotators a ON a.id = j.annotator_id "
                "WHERE a.external_id = ?", (annotator,)).fetchall()


SLOW = "FLOOD-SLOW"  # a chat message with this word takes the fake model 1 s, one reply at a time
_MODEL = threading.Lock()


def slow_on_request(messages: Any, params: Any, adapter: Any) -> str:
    if SLOW in json.dumps(messages):
        with _MODEL:
            time.sleep(1.0)
    return echo_responder(messages, params, adapter)


# Every mode starts its own live server on loopback.
MODES = tuple(pytest.param(m, marks=pytest.mark.live) for m in ("default", "auth", "annotate-only", "admin-off"))


@pytest.fixture(scope="module")
def secrets_on_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Files no request may read: a canary outside the project and the temp folder, one in /tmp,
    plus system files that held secrets in the attack report."""
    home_canary = Path.home() / f".mascot-canary-{secrets.token_hex(4)}.txt"
    home_canary.write_text(CANARY_TEXT)
    tmp_canary = tmp_path_factory.mktemp("outside") / "canary.txt"
    tmp_canary.write_text(CANARY_TEXT)
    yield {"home canary": home_canary, "tmp canary": tmp_canary, "/etc/passwd": Path("/etc/passwd"),
           "/proc/self/environ": Path("/proc/self/environ"), "/proc/self/cmdline": Path("/proc/self/cmdline")}
    home_canary.unlink(missing_ok=True)


@pytest.fixture(scope="module", params=MODES)
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    server = Live(request.param, tmp_path_factory.mktemp(request.param))
    yield server
    server.server.should_exit = True


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    TALLY.write()


@pytest.fixture(autouse=True)
def tally_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """Count each test's crafted requests under its server's mode (tests that start their own server: "own server")."""
    callspec = getattr(request.node, "callspec", None)
    TALLY.mode = callspec.params["live"] if callspec is not None and "live" in callspec.params else "own server"
    yield
    TALLY.mode = "in process"


def leaked(text: str, target: str) -> bool:
    """Whether a response body shows the content of `target` (canary text, passwd, env, cmdline)."""
    return CANARY_TEXT in text or (target == "/etc/passwd" and "root:x:0:0" in text) or (
        target.startswith("/proc/self") and ("PATH=" in text or ADMIN_PASSWORD in text or "chat-pass-77" in text))


def mounted_apps(live: Live) -> list[tuple[str, GradioApp]]:
    """Every Gradio app this mode serves, logged in where a login exists (the attacker's best case)."""
    apps = [("/annotate", live.app("/annotate"))]
    if live.mode != "annotate-only":
        apps.append(("/", live.chat()))
        if live.mode != "admin-off":
            apps.append(("/admin", live.admin()))
    return apps


# ----------------------------------------------------------------------------- file reads
def test_filedata_read_through_every_input_of_every_event(live: Live, secrets_on_disk: dict[str, Path]) -> None:
    """The FileData trick through each input of each event of each app: always refused."""
    canary = secrets_on_disk["home canary"]
    for where, app in mounted_apps(live):
        cfg = app.config()
        types = component_types(cfg)
        for dep in dependencies(cfg):
            for pos, comp in enumerate(dep["inputs"]):
                if types[comp] in STATEFUL:
                    continue
                data: list[Any] = [None] * len(dep["inputs"])
                data[pos] = filedata(canary)
                result = app.new_session().call(dep["id"], data)
                paths = served_paths(result.data)
                fetched = [app.fetch_file(p).text for p in paths]
                refused = not leaked(result.raw, str(canary)) and not any(leaked(t, str(canary)) for t in fetched)
                assert TALLY.record("FileData through an event input", refused), (where, dep.get("api_name"), pos)
    # The server-side oracle: no copy of the canary in any folder Gradio serves from.
    assert not copies_of_canary(), "a FileData input made Gradio copy the canary into a served folder"


def copies_of_canary() -> list[Path]:
    """Files holding the canary text in Gradio's upload/cache folder or the admin app's private cache."""
    roots = [Path(gr_utils.get_upload_folder()), admin_files().root]
    found = []
    for root in roots:
        for path in root.rglob("*") if root.exists() else []:
            try:
                if path.is_file() and path.stat().st_size < 1_000_000 and CANARY_TEXT.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def test_monitoring_is_off_everywhere(live: Live) -> None:
    for where, app in mounted_apps(live):
        for path in ("/monitoring", "/monitoring/summary", "/monitoring/anykey"):
            r = app.client.get(app.base + path)
            assert TALLY.record("monitoring route", r.status_code in (401, 403, 404)), (where, path, r.status_code)


def test_file_route_serves_no_secret(live: Live, secrets_on_disk: dict[str, Path]) -> None:
    """`/gradio_api/file=` of every app refuses canaries, system files, the database and the project."""
    targets = {**{k: str(v) for k, v in secrets_on_disk.items()}, "annotation.db": str(live.db_path),
               "recipe": str(Path("mascot/recipes/tiny-cpu.yaml").resolve()), "README": str(Path("README.md").resolve()),
               "traversal": "../../../../../../etc/passwd"}
    for where, app in mounted_apps(live):
        for name, target in targets.items():
            r = app.fetch_file(target)
            refused = r.status_code in (403, 404) and not leaked(r.text, target) and "SQLite format" not in r.text
            assert TALLY.record("file= read of a server path", refused), (where, name, r.status_code)


def test_one_client_cannot_flood_the_chat(live: Live) -> None:
    if live.mode == "annotate-only":
        pytest.skip("no public chat app in this mode")
    fn = next(d["id"] for d in dependencies(live.chat().config()) if d.get("api_name") == "chat")

    def call(_: int) -> tuple[bool, str]:
        r = live.chat().call(fn, [f"{SLOW} hello", [], "meeting", "round-robin", 1, 0])
        return r.success, r.error

    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(call, range(5)))
    served = [r for r in results if r[0]]
    refused = [r for r in results if not r[0]]
    assert len(served) == 1, results  # five at once from one address (each takes the model 1 s): one is served
    for _, error in refused:
        refused_plainly = "busy with your earlier message; try again in a moment" in error
        assert TALLY.record("concurrent /chat call from one client beyond its one slot", refused_plainly), error


def test_chat_history_meta_and_pack_paths_are_refused(live: Live, secrets_on_disk: dict[str, Path]) -> None:
    if live.mode == "annotate-only":
        r = httpx.post(f"{live.base}/gradio_api/run/chat", json={"data": ["hi"]})
        assert TALLY.record("chat call on the annotator-only server", r.status_code in (404, 405))
        return
    chat = live.chat()
    yaml_pack = live.root / "evil.yaml"
    yaml_pack.write_text("name: evil\npersonas:\n- {name: Eve, role: '[x](http://evil)', goal: g, adapter: /etc}\n")
    for name, target in secrets_on_disk.items():
        history = [{"speaker": "user", "text": "hi", "meta": {"f": filedata(target)}}]
        r = chat.client.post(f"{chat.base}/gradio_api/run/chat",
                             json={"data": ["hello", history, "emotional-support", "round-robin", 1, 0]})
        refused = not leaked(r.text, str(target)) and not any(
            leaked(chat.fetch_file(p).text, str(target)) for p in served_paths(r.json()))
        assert TALLY.record("FileData in /chat history meta", refused), name
    for pack in ("../../../../etc/passwd", "/etc/hosts.yaml", str(yaml_pack), "../packs/meeting", "meeting.yaml"):
        r = chat.client.post(f"{chat.base}/gradio_api/run/chat",
                             json={"data": ["hello", [], pack, "round-robin", 1, 0]})
        refused = r.status_code != 200 and "Unknown persona pack" in r.text and "Eve" not in r.text
        assert TALLY.record("path as /chat pack", refused), (pack, r.text[:200])
    ok = chat.client.post(f"{chat.base}/gradio_api/run/chat", json={"data": ["hello", [], "meeting", "round-robin", 1, 0]})
    assert ok.status_code == 200 and ok.json()["data"][0][0]["speaker"] == "user"


# ----------------------------------------------------------------------------- credentials
PROTECTED_REQUESTS = (
    ("GET", "/config", None),
    ("GET", "/gradio_api/info", None),
    ("GET", "/gradio_api/openapi.json", None),
    ("POST", "/gradio_api/queue/join", {"data": [None], "fn_index": 0, "session_hash": "x1"}),
    ("GET", "/gradio_api/queue/data?session_hash=x1", None),
    ("POST", "/gradio_api/run/predict", {"data": [None], "fn_index": 0}),
    ("POST", "/gradio_api/call/lambda", {"data": [None]}),
    ("POST", "/gradio_api/upload", "file"),
    ("GET", "/gradio_api/upload_progress?upload_id=x", None),
    ("POST", "/gradio_api/component_server", {"data": None, "component_id": 1, "fn_name": "x", "session_hash": "x1"}),
    ("GET", "/gradio_api/file=README.md", None),
)


def _send(client: httpx.Client, base: str, method: str, path: str, body: Any) -> httpx.Response:
    if body == "file":
        return client.post(base + path, files={"files": ("a.txt", b"x")})
    return client.request(method, base + path, json=body) if body is not None else client.request(method, base + path)


def test_every_protected_endpoint_without_and_with_wrong_credentials(live: Live) -> None:
    protected = []
    if live.mode in ("default", "auth"):
        protected.append("/admin")
    if live.mode == "auth":
        protected.append("")
    for prefix in protected:
        for label, cookies in (("none", {}), ("wrong", {"access-token-x": "forged", "access-token-unsecure-x": "x"})):
            client = httpx.Client(timeout=30, cookies=cookies)
            bad = client.post(f"{live.base}{prefix}/login", data={"username": "admin", "password": "wrong-one"})
            assert TALLY.record("login with a wrong password", bad.status_code in (400, 429))
            for method, path, body in PROTECTED_REQUESTS:
                r = _send(client, live.base + prefix, method, path, body)
                refused = r.status_code in (401, 403, 404, 405, 422) and "Studies" not in r.text
                assert TALLY.record("protected endpoint without credentials", refused), (prefix, label, path, r.status_code)
            page = client.get(f"{live.base}{prefix}/")
            refused = "Output folder" not in page.text and "Create a study" not in page.text
            assert TALLY.record("protected page without credentials", refused), (prefix, label)
    if live.mode == "admin-off":
        for method, path, body in PROTECTED_REQUESTS:
            r = _send(httpx.Client(timeout=30), f"{live.base}/admin", method, path, body)
            refused = r.status_code == 403 and "MASCOT_ADMIN_PASSWORD" in r.text
            assert TALLY.record("disabled admin app", refused), (path, r.status_code)
    if live.mode == "annotate-only":
        for prefix in ("/admin", ""):
            for method, path, body in PROTECTED_REQUESTS:
                r = _send(httpx.Client(timeout=30), live.base + prefix, method, path, body)
                refused = r.status_code in (403, 404, 405) or (r.status_code in (301, 302, 307) and "annotate" in r.text)
                refused = refused and "Studies" not in r.text
                assert TALLY.record("researcher/chat endpoint on the annotator-only server", refused), (prefix, path)


def test_bare_prefixes_redirect_to_their_apps(live: Live) -> None:
    """`/annotate` and `/admin` as people type them (and as the start-up line prints them) reach the app at the
    slashed path, an annotator's query kept; the redirect opens nothing that the slashed path would not."""
    client = httpx.Client(timeout=30)
    r = client.get(f"{live.base}/annotate?study=s1&annotator=a1")
    assert r.status_code == 307 and r.headers["location"] == "/annotate/?study=s1&annotator=a1"
    r = client.get(f"{live.base}/admin")
    if live.mode in ("default", "auth"):
        assert r.status_code == 307 and r.headers["location"] == "/admin/"
        page = client.get(f"{live.base}/admin", follow_redirects=True)
        assert "Create a study" not in page.text and "Output folder" not in page.text  # still behind the login
    elif live.mode == "admin-off":
        assert r.status_code == 403 and "MASCOT_ADMIN_PASSWORD" in r.text
    else:
        assert r.status_code in (403, 404, 405) or "/admin" not in r.headers.get("location", "")


def test_public_api_lists_only_chat(live: Live) -> None:
    if live.mode == "annotate-only":
        pytest.skip("no public chat app in this mode")
    chat = live.chat()
    info = chat.client.get(f"{chat.base}/gradio_api/info").json()
    assert list(info["named_endpoints"]) == ["/chat"] and not info["unnamed_endpoints"]
    cfg = chat.config()
    labels = {c.get("props", {}).get("label") for c in cfg["components"]}
    assert not labels & {"Study", "Output folder (empty = checkpoints/<run>)", "Recipe", "Exports"}
    blob = json.dumps(cfg)
    assert "Create a study" not in blob and "Start training" not in blob
    # No admin function behind the public app: event indexes past its own are unknown.
    r = chat.new_session().call(len(cfg["dependencies"]) + 5, [None])
    assert TALLY.record("admin event index on the public app", not r.success)


# ----------------------------------------------------------------------------- paths (admin)
def _dep_with_labels(cfg: dict[str, Any], *labels: str) -> dict[str, Any]:
    by_id = {c["id"]: c.get("props", {}).get("label") for c in cfg["components"]}
    for dep in dependencies(cfg):
        names = [by_id.get(i) for i in dep["inputs"]]
        if all(label in names for label in labels) and len(names) == len(labels):
            return dep
    raise AssertionError(f"no event with inputs {labels}")


def test_admin_paths_are_confined(live: Live) -> None:
    if live.mode != "default":
        pytest.skip("the admin app is the same in every mode that has it")
    admin = live.admin()
    cfg = admin.config()
    outside = live.root / "outside"
    outside.mkdir()
    (live.root / "checkpoints" / "escape").symlink_to(outside)
    start = _dep_with_labels(cfg, "Stage", "Recipe", "Max steps per trainer (0 = the recipe's)",
                             "Output folder (empty = checkpoints/<run>)", "Steps to run (none ticked = all)",
                             "Overrides (field=value per line)")
    attempts = [("tiny-cpu", "../../evil", ""), ("tiny-cpu", str(outside / "run"), ""),
                ("tiny-cpu", "/etc/mascot-run", ""), ("tiny-cpu", str(live.root / "checkpoints/escape/run"), ""),
                ("tiny-cpu", "", f"output_dir={outside}"), ("tiny-cpu", "", "checkpoints_dir=/tmp"),
                ("/etc/passwd.yaml", "", ""), ("../../../etc/hosts.yaml", "", "")]
    for stage, (recipe, out, ov) in [(st, a) for st in ("stage1", "stage2") for a in attempts]:
        r = admin.new_session().call(start["id"], [stage, recipe, 1, out, [], ov])
        shown = str((r.data or [""])[0]) if r.success else ""  # the Train tab answers a refusal in its message area
        refused = (not r.success and ("is refused: it must lie inside" in r.error or "not in the list of choices" in r.error)) \
            or shown.startswith("❌") and "is refused: it must lie inside" in shown
        assert TALLY.record("admin output folder / recipe outside checkpoints and runs", refused), (stage, recipe, out, ov, r.error)
    assert not any(outside.iterdir()), "nothing may be written outside the allowed folders"
    card = _dep_with_labels(cfg, "Run card")
    for path in ("/etc", "../..", str(outside)):
        r = admin.new_session().call(card["id"], [path])
        assert TALLY.record("admin run card outside checkpoints", not r.success), path


# ----------------------------------------------------------------------------- annotators
def _annotate(live: Live) -> tuple[GradioApp, dict[str, int]]:
    app = live.app("/annotate")
    deps = {d["api_name"]: d["id"] for d in dependencies(app.config())}
    return app, deps


def _begin(app: GradioApp, deps: dict[str, int], study: str, annotator: Any, keys: Any = None, link: str = "") -> str:
    """Open the page with the study's link (`link`: its key; "" leaves the key out), then start under `annotator`
    through the page's form, as a participant whose link lacked the annotator part would."""
    query = "?" + urlencode({"study": study, "key": link}) if link else ""
    assert app.call(deps["load"], [keys or {}], query=query).success
    return app.call(deps["begin"], [None, None, study, annotator, keys or {}]).raw


def _link(live: Live, study: str = "s1") -> str:
    return live.store.link_key(study_id=study)


def test_identity_race_and_scripted_votes(live: Live) -> None:
    app, deps = _annotate(live)
    first = app.new_session()
    raw = _begin(first, deps, "s1", "P-race", link=_link(live))
    assert "0 / 3</b> completed" in raw and "already in use" not in raw, raw[-800:]
    second = app.new_session()
    raw = _begin(second, deps, "s1", "P-race", link=_link(live))
    assert TALLY.record("second browser under the same annotator id", "already in use in another browser" in raw)
    assert "ask the study owner to release your ID" in raw  # the way forward for a participant on a new device
    for variant in ("p-race", "Ｐ-ＲＡＣＥ", " P-race "):  # the same id in another case, width or with spaces
        raw = _begin(app.new_session(), deps, "s1", variant, link=_link(live))
        assert TALLY.record("the same annotator id retyped in another browser", "already in use in another browser" in raw)
    raw = _begin(app.new_session(), deps, "s1", "P-race", {"s1\x1fP-race": "guessed-key"}, link=_link(live))
    assert TALLY.record("forged annotator key", "already in use in another browser" in raw)
    raw = _begin(app.new_session(), deps, "s1", "P-race", {"browser": "f" * 36}, link=_link(live))
    assert TALLY.record("forged browser id", "already in use in another browser" in raw)
    vote = first.call(deps["handler"], [None, None, None, None, None, None, None, None, "first"])
    assert "Saved" in vote.raw, vote.raw[:500]
    # The second session's vote cannot land anywhere: it holds no task.
    stolen = second.call(deps["handler"], [None, None, None, None, None, None, None, None, "second"])
    assert TALLY.record("vote from the refused session", "Saved" not in stolen.raw)
    # one vote, the first browser's, with the server-measured time; flagged exactly when that time is API speed
    # (a scripted vote is usually well under API_SPEED_SECONDS, but a loaded CI machine can stretch it)
    [(comment, too_fast, seconds)] = live.judgments("P-race")
    assert comment == "first" and seconds is not None and bool(too_fast) == (seconds < API_SPEED_SECONDS), (too_fast, seconds)
    # Events need the page session that only the page's load event opens.
    bare = app.new_session().call(deps["handler"], [None, None, None, None, None, None, None, None, ""])
    assert TALLY.record("vote without a page session", "no page session" in bare.raw)
    bare = app.new_session().call(deps["begin"], [None, None, "s1", "P-bare", {}])
    assert TALLY.record("start without a page session", "no page session" in bare.raw)


def test_completion_code_needs_work(live: Live) -> None:
    app, deps = _annotate(live)
    raw = _begin(app.new_session(), deps, "empty", "P-lazy", link=_link(live, "empty"))
    assert TALLY.record("completion code without work", "CODE-EMPTY" not in raw and "This study is full" in raw)
    assert "you are done" not in raw


def test_scripted_ids_cannot_starve_a_study(live: Live) -> None:
    app, deps = _annotate(live)
    for n in range(100):  # new ids without the study's link key: none gets a hold
        raw = _begin(app.new_session(), deps, "starve", f"bot-{n}")
        assert TALLY.record("new annotator id without the study link key", "This study link is not valid" in raw)
    for wrong in ("guess", _link(live, "starve")[:-1], _link(live, "s1")):
        raw = _begin(app.new_session(), deps, "starve", "bot-key", link=wrong)
        assert TALLY.record("new annotator id with a wrong link key", "This study link is not valid" in raw)
    assert live.store.overview(study_id="starve").live_holds == 0
    # The real participant, with the full link, finishes the study.
    real = app.new_session()
    raw = _begin(real, deps, "starve", "P-real", link=_link(live, "starve"))
    assert "0 / 2</b> completed" in raw, raw[-500:]
    for _ in range(2):
        raw = real.call(deps["handler"], [None, None, None, None, None, None, None, None, ""]).raw
    assert "Thank you, you are done" in raw and "CODE-STARVE" in raw
    raw = _begin(app.new_session(), deps, "starve", "P-late", link=_link(live, "starve"))
    assert TALLY.record("participant with no task left told the study is full",
                        "This study is full" in raw and "you are done" not in raw and "CODE-STARVE" not in raw)


def test_oversize_and_malformed_annotator_input(live: Live) -> None:
    app, deps = _annotate(live)
    for where, target in mounted_apps(live):
        big = target.upload("big.bin", b"0" * (live.settings.max_upload_mb * 1024 * 1024 + 1))
        refused = big.status_code in (400, 403, 413)
        assert TALLY.record("upload over max_file_size", refused), (where, big.status_code)
        small = target.upload("evil.yaml", b"name: evil\n")
        refused = small.status_code == 403 if where != "/admin" else small.status_code == 200
        assert TALLY.record("upload to an app without file inputs", refused) if where != "/admin" else refused
    raw = _begin(app.new_session(), deps, "s1", "P\x00NUL", link=_link(live))
    assert TALLY.record("annotator id with NUL", "Invalid annotator id" in raw)
    raw = _begin(app.new_session(), deps, "s1", "x" * 5000, link=_link(live))
    assert TALLY.record("annotator id of 5,000 characters", "Invalid annotator id" in raw)
    s = app.new_session()
    _begin(s, deps, "s1", "P-long", link=_link(live))
    r = s.call(deps["handler"], [None, None, None, None, None, None, None, None, "c" * 5_000_000])
    assert TALLY.record("comment of 5,000,000 characters", "Saved" not in r.raw and "2,000" in r.raw)
    assert live.judgments("P-long") == []
    if live.mode != "annotate-only":
        chat = live.chat()
        for name, data in (
            ("5 MB history turn", ["hi", [{"speaker": "user", "text": "x" * 5_000_000}], "meeting", "round-robin", 1, 0]),
            ("history of 10,000 turns", ["hi", [{"speaker": "user", "text": "x"}] * 10_000, "meeting", "round-robin", 1, 0]),
            ("5 MB message", ["x" * 5_000_000, [], "meeting", "round-robin", 1, 0]),
        ):
            r = chat.client.post(f"{chat.base}/gradio_api/run/chat", json={"data": data})
            assert TALLY.record(f"/chat {name}", r.status_code != 200 and "limit" in r.text), (name, r.text[:200])


def test_formula_cells_are_neutralised_in_exports(live: Live) -> None:
    app, deps = _annotate(live)
    s = app.new_session()
    _begin(s, deps, "inj", '=HYPERLINK("http://evil","x")', link=_link(live, "inj"))
    assert "Saved" in s.call(deps["handler"], [None, None, None, None, None, None, None, None, "+SUM(1,2)"]).raw
    if live.mode != "default":
        return
    admin = live.admin()
    cfg = admin.config()
    export = _dep_with_labels(cfg, "Study")
    candidates = [d for d in dependencies(cfg) if d["inputs"] == export["inputs"]]
    files = []
    for dep in candidates:
        r = admin.new_session().call(dep["id"], ["inj"])
        files = [p for p in served_paths(r.data) if p.endswith("judgments.csv")]
        if files:
            break
    assert files, "the Downloads button made no CSV"
    csv_text = admin.fetch_file(files[0]).text
    rows = csv_text.splitlines()[1:]
    for cell in ('"\'=HYPERLINK(""http://evil"",""x"")"', "'+SUM(1,2)", "'@SUM(A1)", "'=cmd|"):
        assert TALLY.record("spreadsheet formula cell in the export", cell in csv_text), (cell, rows)
    # Researcher files are served under /admin only, never by the open apps.
    for where in ("/annotate", ""):
        r = httpx.get(f"{live.base}{where}/gradio_api/file={files[0]}")
        assert TALLY.record("researcher export through an open app", r.status_code == 403), (where, r.status_code)


# ----------------------------------------------------------------------------- last: locks the address out
def test_login_rate_limit(live: Live) -> None:
    if live.mode != "default":
        pytest.skip("one mode is enough: the limiter wraps every login route of the server")
    client = httpx.Client(timeout=30, headers={"X-Test": "rate"})
    codes = [client.post(f"{live.base}/admin/login", data={"username": "admin", "password": f"guess{i}"}).status_code
             for i in range(8)]
    assert codes[:3] == [400, 400, 400] and codes[-1] == 429, codes
    for code in codes:
        TALLY.record("password guessing", code in (400, 429))
    # Even the right password waits out the lock (the limiter answers before the password is checked).
    r = client.post(f"{live.base}/admin/login", data={"username": "admin", "password": ADMIN_PASSWORD})
    assert TALLY.record("right password during the lock", r.status_code == 429) and "Retry-After" in r.headers
