"""End to end in headless Chromium: a researcher logs in to /admin and sees Studies (and Train); the
public app at / shows the chat only, with no Studies or Train tab."""

from __future__ import annotations

import pytest

from app.settings import Settings
from tests.conftest import new_page, served

pytestmark = pytest.mark.browser
PASSWORD = "browser-pass-123"


@pytest.fixture
def base(port, tmp_path):
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port,
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    with served(settings) as url:
        yield url


def tab(name: str, page):
    """The visible tab button called `name`."""
    return page.locator("[role=tab]:visible", has_text=name)


def test_admin_login_then_studies(browser, base, tmp_path):
    with new_page(browser) as page:
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


def test_public_app_has_no_researcher_tabs(browser, base):
    with new_page(browser) as page:
        page.goto(f"{base}/")
        page.locator("#msg textarea").wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert page.get_by_role("tab", name="Studies").count() == 0
        assert page.get_by_role("tab", name="Train").count() == 0
        assert "Create a study" not in body and "Start training" not in body and "Output folder" not in body
