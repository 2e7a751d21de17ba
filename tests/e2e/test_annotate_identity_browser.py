"""End to end in headless Chromium: a participant reloads mid-study and continues; a second device under the same
id is told to ask the study owner to release it; the researcher releases the id from the Studies tab of /admin,
and the participant continues on the second device. Also: no clear icon on the responses, an empty progress bar
at 0, and no task heading on the finish screen."""

from __future__ import annotations

import re

import pytest

from annotation.importing import import_pairs
from annotation.schemas import StudyConfig
from app.settings import Settings
from tests.annotation_fixtures import make_store, pair_line, write_jsonl
from tests.conftest import served

pytestmark = pytest.mark.browser
PASSWORD = "browser-pass-123"
WAIT = 60_000
TASK = re.compile(r"side-[ab] reply i\d")


@pytest.fixture
def site(port, tmp_path):
    store = make_store(tmp_path)  # the database the served app opens: sqlite:///<data_dir>/annotation.db
    store.create_study(config=StudyConfig(id="study1", annotators_per_item=1, completion_code="XYZ-1"))
    import_pairs(store, study_id="study1", path=write_jsonl(tmp_path / "p.jsonl", [pair_line(f"i{n}") for n in range(3)]))
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port,
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    with served(settings) as url:
        yield url, f"{url}/annotate/?study=study1&key={store.link_key(study_id='study1')}&annotator=P1", store


def _progress(page, text: str) -> None:
    page.get_by_text(text, exact=False).first.wait_for(timeout=WAIT)


def test_reload_second_device_release_and_continue(browser, site, tmp_path):
    base, link, store = site
    laptop, phone, admin = browser.new_context(), browser.new_context(), browser.new_context()
    try:
        page = laptop.new_page()
        page.goto(link)
        _progress(page, "0 / 3 completed")
        assert page.locator(".annot-bar > div").first.get_attribute("style") == "width:0.0%"  # empty, not grey
        assert page.locator(".annot-chat button:visible").count() == 0  # no clear (trash) icon on the responses
        # The browser id was stored before the first request, so even a first load that timed out would resume.
        assert re.fullmatch(r"[0-9a-f]{36}", page.evaluate("localStorage.getItem('annotate-browser-id')") or "")
        page.click("#vote-a")
        _progress(page, "1 / 3 completed")
        shown = page.inner_text("body")
        page.reload()
        _progress(page, "1 / 3 completed")
        assert TASK.findall(page.inner_text("body")) == TASK.findall(shown)  # the same held task, same sides

        other = phone.new_page()  # another device: its own storage, so another browser id
        other.goto(link)
        other.get_by_text("ask the study owner to release your ID", exact=False).wait_for(timeout=WAIT)
        assert other.locator("#vote-a").count() == 0 or not other.locator("#vote-a").is_visible()

        researcher = admin.new_page()
        researcher.goto(f"{base}/admin/")
        researcher.get_by_label("username").fill("admin")
        researcher.get_by_label("password").fill(PASSWORD)
        researcher.get_by_role("button", name="Login").click()
        researcher.get_by_text("Release an annotator ID").first.wait_for(timeout=WAIT)
        researcher.get_by_text("Release an annotator ID").first.click()
        researcher.get_by_label("Annotator ID to release").fill("p1")  # case does not matter
        researcher.get_by_role("button", name="Release ID").click()
        researcher.get_by_text("Released", exact=False).first.wait_for(timeout=WAIT)

        other.reload()
        _progress(other, "1 / 3 completed")  # continues where the laptop stopped
        for done in (2, 3):
            other.click("#vote-b")
            if done < 3:
                _progress(other, f"{done} / 3 completed")
        other.get_by_text("Thank you, you are done!").wait_for(timeout=WAIT)
        assert "XYZ-1" in other.inner_text("body")
        assert not other.get_by_text("Which response is better?").first.is_visible()
        page.reload()  # the laptop is now the other browser
        page.get_by_text("already in use in another browser", exact=False).wait_for(timeout=WAIT)
        assert store.overview(study_id="study1").judgments == 3  # each vote once, none lost
        other.screenshot(path=str(tmp_path / "finish.png"), full_page=True)
    finally:
        for context in (laptop, phone, admin):
            context.close()
