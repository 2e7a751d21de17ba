"""End to end in headless Chromium: a researcher logs in to /admin and sees Studies (and Train); the
public app at / shows the chat only, with no Studies or Train tab."""

from __future__ import annotations

import pytest

from app.server import build_server
from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.engine import Engine, EngineConfig
from tests.conftest import run_uvicorn

pytestmark = pytest.mark.browser
PASSWORD = "browser-pass-123"


@pytest.fixture
def base(port, tmp_path):
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port,
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    server, _ = run_uvicorn(build_server(settings, Engine(EngineConfig(backend="fake"), FakeBackend())), port)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True


def tab(name: str, page):
    """The visible tab button called `name`."""
    return page.locator("[role=tab]:visible", has_text=name)


def test_admin_login_then_studies(browser, base, tmp_path):
    page = browser.new_page()
    try:
        page.goto(f"{base}/admin/")
        page.get_by_label("username").fill("admin")
        page.get_by_label("password").fill("not-the-password")
        page.get_by_role("button", name="Login").click()
        page.get_by_text("Incorrect").first.wait_for(timeout=30_000)
        assert page.get_by_role("tab", name="Studies").count() == 0
        page.get_by_label("username").fill("admin")
        page.get_by_label("password").fill(PASSWORD)
        page.get_by_role("button", name="Login").click()
        tab("Studies", page).wait_for(timeout=60_000)  # Gradio also keeps hidden copies for its overflow menu
        assert tab("Train", page).count() == 1
        page.get_by_text("Create a study").first.wait_for(timeout=30_000)
        page.screenshot(path=str(tmp_path / "admin.png"), full_page=True)
    finally:
        page.close()


def test_public_app_has_no_researcher_tabs(browser, base):
    page = browser.new_page()
    try:
        page.goto(f"{base}/")
        page.locator("#msg textarea").wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert page.get_by_role("tab", name="Studies").count() == 0
        assert page.get_by_role("tab", name="Train").count() == 0
        assert "Create a study" not in body and "Start training" not in body and "Output folder" not in body
    finally:
        page.close()
