"""In-process checks of the server's second hardening pass: login limits that a forged `X-Forwarded-For` cannot
dodge, a per-account cap, plain-text annotator notices, no error details on the open apps, inert Markdown
transcripts, and no upload route on `/` or `/annotate/`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.routing import _IncludedRouter
from fastapi.testclient import TestClient
from markdown_it import MarkdownIt
from starlette.routing import Mount

from app.admin import ADMIN_TABS
from app.annotate_page import COMPONENT_NAMES, INVALID_STUDY_MESSAGE, on_load, plain, start
from app.server import build_server, disabled_admin_page, startup_line, uvicorn_options
from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Directive, Turn
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import load_pack
from mascot.group.transcripts import to_markdown
from tests.annotation_fixtures import make_store, seed_study

ADMIN_PASSWORD = "correct-horse-battery"
CHAT_AUTH = ("friend", "chat-pass-77")
XSS = "<img src=x onerror=alert(1)>"
C = {name: name for name in COMPONENT_NAMES}
COMMONMARK = MarkdownIt("commonmark")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """One server with the chat login, /annotate and /admin; its engine, and a client logged in to the chat."""
    root = tmp_path_factory.mktemp("hardening2")
    settings = Settings(data_dir=str(root / "data"), backend="fake", mode="round-robin", checkpoints_dir=str(root / "ck"),
                        runs_dir=str(root / "runs"), admin_password=ADMIN_PASSWORD, auth=":".join(CHAT_AUTH))
    engine = Engine(EngineConfig(backend="fake"), FakeBackend())
    app = build_server(settings, engine)
    with TestClient(app) as client:
        assert client.post("/login", data=dict(zip(("username", "password"), CHAT_AUTH))).status_code == 200
        yield SimpleNamespace(app=app, settings=settings, engine=engine, client=client, stack=stack(app, settings))


def stack(app: FastAPI, settings: Settings | None = None) -> Any:
    """The ASGI app uvicorn runs: `app` wrapped as `uvicorn_options(settings)` asks (uvicorn's defaults if None)."""
    config = uvicorn.Config(app, **uvicorn_options(settings)) if settings else uvicorn.Config(app)
    config.load()
    return config.loaded_app


def peer(asgi: Any, host: str) -> TestClient:
    """A client whose TCP peer is `host`."""
    return TestClient(asgi, client=(host, 40000))


def login(client: TestClient, path: str, user: str, password: str, forwarded: str | None = None) -> int:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return client.post(path, data={"username": user, "password": password}, headers=headers).status_code


# ----------------------------------------------------------------------------- trusted proxies
def test_trusted_proxies_setting_is_checked_and_reaches_uvicorn() -> None:
    assert uvicorn_options(Settings())["proxy_headers"] is False
    s = Settings.from_env({"MASCOT_TRUSTED_PROXIES": " 10.0.0.1, 10.1.2.3/8 ,::1"})
    assert s.proxy_list() == ["10.0.0.1", "10.0.0.0/8", "::1"]
    assert uvicorn_options(s) == {"host": s.host, "port": s.port, "log_level": "warning",
                                "proxy_headers": True, "forwarded_allow_ips": "10.0.0.1,10.0.0.0/8,::1"}
    for bad in ("*", "proxy.internal", "10.0.0.1,nginx"):
        with pytest.raises(ConfigError, match="MASCOT_TRUSTED_PROXIES"):
            Settings(trusted_proxies=bad)


def test_rotating_forwarded_for_from_an_untrusted_peer_is_locked(built: SimpleNamespace) -> None:
    # uvicorn's own default believes X-Forwarded-For from loopback: each forged address gets fresh tries.
    naive = peer(stack(built.app), "127.0.0.1")
    codes = [login(naive, "/admin/login", "rotating-a", f"guess{i}", f"203.0.113.{i}") for i in range(7)]
    assert codes == [400] * 7, codes
    # As served (no trusted proxy): the limiter sees the loopback peer, whatever the header says.
    served = peer(built.stack, "127.0.0.1")
    codes = [login(served, "/admin/login", "rotating-b", f"guess{i}", f"198.51.100.{i}") for i in range(7)]
    assert codes[:5] == [400] * 5 and codes[5:] == [429, 429], codes
    r = served.post("/admin/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                    headers={"X-Forwarded-For": "192.0.2.77"})
    assert r.status_code == 429 and "from your address" in r.json()["detail"] and int(r.headers["Retry-After"]) > 0


def test_a_trusted_proxy_forwards_its_clients_addresses(built: SimpleNamespace) -> None:
    proxied = stack(built.app, Settings(data_dir=built.settings.data_dir, trusted_proxies="10.9.9.9"))
    via_proxy = peer(proxied, "10.9.9.9")
    codes = [login(via_proxy, "/admin/login", f"proxied-{i}", "wrong", f"192.0.2.{i}") for i in range(7)]
    assert codes == [400] * 7, codes  # seven clients behind the proxy, one failure each
    stranger = peer(proxied, "10.9.9.10")  # not the proxy: its header is ignored
    codes = [login(stranger, "/admin/login", f"stranger-{i}", "wrong", f"192.0.2.{50 + i}") for i in range(6)]
    assert codes[-1] == 429, codes


def test_failed_logins_per_account_are_capped_across_addresses(built: SimpleNamespace) -> None:
    user, password = CHAT_AUTH
    for i in range(20):
        assert login(peer(built.stack, f"198.18.0.{i}"), "/login", user, f"guess{i}") == 400
    fresh = peer(built.stack, "198.18.1.1")
    r = fresh.post("/login", data={"username": f"  {user} ", "password": password})  # Gradio strips the name
    assert r.status_code == 429 and "for this account" in r.json()["detail"]
    assert login(fresh, "/login/", user, password) == 429
    assert login(fresh, "/admin/login", "admin", ADMIN_PASSWORD) == 200  # other accounts and paths unaffected


def test_login_forms_reach_the_route_intact(built: SimpleNamespace) -> None:
    client = peer(built.stack, "198.18.2.1")
    r = client.post("/admin/login", files={"username": (None, "admin"), "password": (None, ADMIN_PASSWORD)})
    assert r.status_code == 200 and r.json() == {"success": True}  # multipart, as the browser's login page sends
    assert client.post("/admin/login", data={"username": "admin", "password": ADMIN_PASSWORD}).status_code == 200
    chunked = client.post("/admin/login", content=iter([b"username=admin&password=x"]),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert chunked.status_code == 411
    big = client.post("/admin/login", data={"username": "admin", "password": "x" * 20_000})
    assert big.status_code == 413


# ----------------------------------------------------------------------------- annotator page
def rendered(markdown: str) -> str:
    return COMMONMARK.render(markdown)


def test_an_unknown_study_gets_one_neutral_answer(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    for study in ("nope", XSS, "s1<script>alert(1)</script>", "[x](javascript:alert(1))"):
        out = on_load(store, C, SimpleNamespace(query_params={"study": study, "annotator": "P1"}))
        assert out["status"] == f"⚠️ {INVALID_STUDY_MESSAGE}"
        assert out["study_in"] == "" and out["state"]["study"] == ""  # nothing from the link is kept or shown
        assert out["login"]["visible"] and not out["task"]["visible"]
    assert "s1" not in INVALID_STUDY_MESSAGE and "python" not in INVALID_STUDY_MESSAGE


def test_ids_from_the_link_show_as_plain_text(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    for annotator in (f"{XSS}\x00", f"[click](http://evil)\x07{XSS}"):
        out = start(store, C, "s1", annotator)
        html = rendered(out["status"])
        assert "Invalid annotator id" in out["status"]
        assert "<img" not in html and "<a " not in html and "&lt;img src=x onerror=" in html
    html = rendered(plain("*bold* <b>x</b> `code` [a](b) ![i](x) &amp; \\"))
    assert re.sub(r"<[^>]+>", "", html).strip() == "*bold* &lt;b&gt;x&lt;/b&gt; `code` [a](b) ![i](x) &amp;amp; \\"


# ----------------------------------------------------------------------------- error details
def gradio_apps(app: FastAPI) -> dict[str, Any]:
    """Mount path -> the Gradio Blocks served there."""
    return {m.path: m.app.get_blocks() for m in app.routes if isinstance(m, Mount) and hasattr(m.app, "get_blocks")}


def test_error_details_are_off_on_the_open_apps(built: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    apps = gradio_apps(built.app)
    assert {p: b.show_error for p, b in apps.items()} == {"": False, "/annotate": False, "/admin": True}
    client = built.client
    r = client.post("/gradio_api/run/chat", json={"data": [1, [], "meeting", "round-robin", 1, 0]})
    error = r.json()["error"]
    assert r.status_code == 500 and error.endswith(".") and "attribute" not in error and "strip" not in error
    r = client.post("/gradio_api/run/chat", json={"data": ["hi", "not a list", "meeting", "round-robin", 1, 0]})
    assert r.json()["error"] == "history must be a list of turns as returned by /chat."  # gr.Error still shown

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("internal detail /srv/secret/path")

    monkeypatch.setattr(built.engine, "group", broken)
    r = client.post("/gradio_api/run/chat", json={"data": ["hi", [], "meeting", "round-robin", 1, 0]})
    assert r.status_code == 500 and r.json()["error"] is None and "secret" not in r.text


# ----------------------------------------------------------------------------- transcripts
def test_markdown_transcripts_render_no_live_tag() -> None:
    pack = load_pack("meeting").copy()
    pack.title = f"Team {XSS}"
    pack.personas[0].name = f"<script>alert(1)</script>{XSS}"
    pack.personas[0].role = "[role](javascript:alert(1))"
    dialogue = Dialogue(turns=[
        Turn(speaker="user", text=f"hello {XSS} `code` \\<b>bold</b> &lt;i&gt;"),
        Turn(speaker=pack.personas[0].name, text=f"![x](http://evil/x.png) <a href='http://evil'>{XSS}</a>",
             directive=Directive(speaker=XSS, action="<svg onload=alert(1)>", tone=f"{XSS}]")),
    ])
    html = rendered(to_markdown(dialogue, pack))
    tags = set(re.findall(r"<\s*([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"h1", "p", "strong", "em", "blockquote"}, tags
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;" in html and "&amp;lt;i&amp;gt;" in html
    assert "**You:** hello" in to_markdown(dialogue, pack)


# ----------------------------------------------------------------------------- uploads
def post_routes(app: FastAPI) -> dict[str, list[str]]:
    """Mount path -> the concrete paths of every POST route the Gradio app mounted there serves."""
    def walk(routes: list[Any], prefix: str) -> Iterator[str]:
        for route in routes:
            if isinstance(route, _IncludedRouter):
                yield from walk(route.original_router.routes, prefix + route.include_context.prefix)
            elif "POST" in (getattr(route, "methods", None) or ()):
                yield re.sub(r"\{[^}]+\}", "x", prefix + route.path)

    return {m.path: sorted(set(walk(m.app.routes, m.path))) for m in app.routes
            if isinstance(m, Mount) and hasattr(m.app, "get_blocks")}


def test_open_apps_refuse_every_upload_route(built: SimpleNamespace) -> None:
    routes = post_routes(built.app)
    client = built.client
    assert client.post("/admin/login", data={"username": "admin", "password": ADMIN_PASSWORD}).status_code == 200
    for mount in ("", "/annotate"):
        api = [p for p in routes[mount] if p.startswith(f"{mount}/gradio_api/")]
        assert f"{mount}/gradio_api/upload" in api and f"{mount}/gradio_api/process_recording" in api
        for path in api:
            for field in ("files", "video"):
                r = client.post(path, files={field: ("evil.yaml", b"name: evil\n", "application/octet-stream")})
                assert r.status_code in (403, 404, 405), (path, field, r.status_code, r.text[:200])
        for path in (f"{mount}/gradio_api/upload", f"{mount}/gradio_api/process_recording"):
            for variant in (path, path + "/", path + "?upload_id=x"):
                r = client.post(variant, content=b"raw", headers={"Content-Type": "application/octet-stream"})
                assert r.status_code in (403, 404, 405), (variant, r.status_code)
        for odd in (f"{mount}//gradio_api/upload", f"{mount}/gradio_api//upload", f"{mount}/GRADIO_API/upload"):
            r = client.post(odd, files={"files": ("evil.yaml", b"name: evil\n")})
            assert r.status_code in (403, 404, 405), (odd, r.status_code)
    # The researcher app keeps its uploads (study imports).
    r = client.post("/admin/gradio_api/upload", files={"files": ("pairs.jsonl", b"{}\n")})
    assert r.status_code == 200, r.text[:200]


# ----------------------------------------------------------------------------- start-up line and the switched-off admin page
def test_startup_line_names_only_what_this_mode_serves() -> None:
    line = startup_line(Settings(annotate_only=True, port=7001))
    assert "/annotate/" in line and "researchers" not in line and "/admin" not in line
    line = startup_line(Settings(port=7001, admin_password=ADMIN_PASSWORD))
    assert "researchers: /admin" in line and "key=" in line
    assert "disabled" in startup_line(Settings(port=7001))


def test_switched_off_admin_page_lists_the_real_tabs_without_backticks() -> None:
    page = disabled_admin_page()
    assert "`" not in page and "<code>MASCOT_ADMIN_PASSWORD</code>" in page
    assert f"({', '.join(title for title, _, _ in ADMIN_TABS)})" in page  # (Studies, Train, Safety)
