"""End to end in headless Chromium: a researcher logs in to /admin and sees Studies (and Train); the
public app at / shows the chat only, with no Studies or Train tab."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from tests.conftest import new_page, open_chat, served

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


def _login(page, base: str) -> None:
    page.goto(f"{base}/admin")  # the address the start-up line prints, without the trailing slash
    page.get_by_label("username").fill("admin")
    page.get_by_label("password").fill(PASSWORD)
    page.get_by_role("button", name="Login").click()
    tab("Studies", page).wait_for(timeout=60_000)


def test_statistics_appear_once_computed_and_train_draws_curves(browser, port, tmp_path):
    """A study with judgments: the result tables stay hidden until 'Compute statistics' (empty tables read
    "1 2 3"), then show the sign test; the Train tab draws the followed run's reward curves as a figure."""
    import shutil

    from annotation.importing import import_judgments, import_pairs
    from annotation.schemas import StudyConfig
    from tests.annotation_fixtures import make_store, pair_line, write_jsonl

    store = make_store(tmp_path)
    store.create_study(config=StudyConfig(id="ed-1", annotators_per_item=1))
    import_pairs(store, study_id="ed-1", path=write_jsonl(tmp_path / "p.jsonl", [pair_line(f"i{n}") for n in range(8)]))
    (tmp_path / "j.csv").write_text("item_id,annotator,choice\n" + "".join(f"i{n},u1,MASCOT\n" for n in range(8)))
    import_judgments(store, study_id="ed-1", path=tmp_path / "j.csv")
    run = tmp_path / "checkpoints" / "tiny-cpu"
    run.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-cpu" / "progress.jsonl", run)
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port,
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    with served(settings) as url, new_page(browser) as page:
        _login(page, url)
        table = page.get_by_text("Pairwise preferences (two-sided sign test", exact=False)
        assert table.count() == 0 or not table.first.is_visible()
        page.get_by_label("Study", exact=True).click()
        page.get_by_role("option", name="ed-1").click()
        page.get_by_role("button", name="Compute statistics").click()
        table.first.wait_for(state="visible", timeout=60_000)
        page.get_by_text("MASCOT").first.wait_for(timeout=30_000)
        tab("Train", page).click()
        page.get_by_text("grpo:anchor").first.wait_for(timeout=30_000)  # the steps table follows the run
        page.locator("img[src^='data:image/']").first.wait_for(timeout=30_000)  # the figure, drawn (webp)
        page.screenshot(path=str(tmp_path / "train.png"), full_page=True)


def test_public_app_has_no_researcher_tabs(browser, base):
    with new_page(browser) as page:
        open_chat(page, base)
        body = page.inner_text("body")
        assert page.get_by_role("tab", name="Studies").count() == 0
        assert page.get_by_role("tab", name="Train").count() == 0
        assert "Create a study" not in body and "Start training" not in body and "Output folder" not in body


def test_a_researcher_launches_an_evaluation_job_watches_it_finish_and_reads_its_table(browser, port, tmp_path):
    """The Jobs tab end to end: a bad flag is refused in place (the page stays), then a tiny evaluation runs as a
    job, its state reaches 'finished' in the table, and its results show as a table."""
    runs = tmp_path / "runs"
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port, runs_dir=str(runs),
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    with served(settings) as url, new_page(browser) as page:
        _login(page, url)
        tab("Jobs", page).click()
        page.get_by_text("Command: ").first.wait_for(timeout=30_000)  # the example's command line, before any edit
        page.get_by_text("Jobs: none yet").first.wait_for(timeout=30_000)  # an empty table says so
        assert page.get_by_label("Log (last lines)").count() == 0 or not page.get_by_label("Log (last lines)").is_visible()
        box = page.get_by_label("Arguments (the command's own flags)")
        box.fill("--limt 1")
        page.get_by_role("button", name="Launch").click()
        page.get_by_text("unrecognized arguments: --limt 1").first.wait_for(timeout=30_000)
        box.fill(f"--backend fake --systems zero-shot --limit 1 --scorer none --output {runs / 'ev'}")
        page.get_by_text("Command: ").first.wait_for(timeout=30_000)
        page.get_by_role("button", name="Launch").click()
        page.get_by_text("finished", exact=True).locator("visible=true").first.wait_for(timeout=180_000)
        # the results table: one row per system and metric, a column per persona
        page.get_by_text("consistency", exact=True).locator("visible=true").first.wait_for(timeout=30_000)
        assert page.get_by_text("Overall", exact=True).locator("visible=true").count() > 0
        page.screenshot(path=str(tmp_path / "jobs.png"), full_page=True)


def test_studies_made_elsewhere_appear_and_a_refused_import_is_a_message(browser, port, tmp_path):
    """A study created from the command line after the page loaded shows up in the selector on its own; an import
    without a file is refused with a line in the message area while the studies table stays."""
    from annotation.schemas import StudyConfig
    from tests.annotation_fixtures import make_store

    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port,
                        runs_dir=str(tmp_path / "runs"), checkpoints_dir=str(tmp_path / "checkpoints"),
                        admin_password=PASSWORD)
    with served(settings) as url, new_page(browser) as page:
        _login(page, url)
        page.get_by_text("Create a study").first.wait_for(timeout=30_000)
        make_store(tmp_path).create_study(config=StudyConfig(id="made-by-cli", annotators_per_item=1))
        page.get_by_label("Study", exact=True).click()
        page.get_by_role("option", name="made-by-cli").wait_for(timeout=30_000)
        page.get_by_role("option", name="made-by-cli").click()
        page.get_by_text("Import", exact=True).click()
        page.get_by_role("button", name="Import pairs").click()
        page.get_by_text("❌ Select a study and upload a file first.").wait_for(timeout=30_000)
        assert page.locator(".error").count() == 0  # no output turned into an error frame
        page.get_by_text("made-by-cli").locator("visible=true").first.wait_for(timeout=10_000)


def test_a_researcher_puts_a_run_live_and_the_chat_names_it(browser, port, tmp_path):
    """Train tab → Finished runs → Put this run live: the chat's status line names the new run for a new
    conversation; Roll back returns to the start-up run."""
    import shutil

    from mascot.group.engine import Engine, EngineConfig
    from tests.test_engine import _Adapters

    run = tmp_path / "checkpoints" / "demos-run"
    shutil.copytree(Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-cpu", run)
    engine = Engine(EngineConfig(backend="fake"), _Adapters(), run_dir=Path("checkpoints/tiny-cpu"))
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port, runs_dir=str(tmp_path / "runs"),
                        checkpoints_dir=str(tmp_path / "checkpoints"), admin_password=PASSWORD)
    with served(settings, engine) as url, new_page(browser) as page:
        _login(page, url)
        tab("Train", page).click()
        page.get_by_text("Finished runs").click()
        page.get_by_role("button", name="Refresh").locator("visible=true").first.click()
        page.get_by_label("Run card").click()
        page.get_by_role("option", name=str(run)).click()
        page.get_by_role("button", name="Put this run live in the chat").click()
        page.get_by_text("new conversations get demos-run (v1)").wait_for(timeout=30_000)
        with new_page(browser) as chat:
            open_chat(chat, url)
            chat.wait_for_function("() => (document.querySelector('#status') || {}).textContent?.includes("
                                   "'Live run: demos-run (v1)')", timeout=30_000)
        page.get_by_role("button", name="Roll back").click()
        page.get_by_text("Rolled back.").wait_for(timeout=30_000)
        assert engine.live.current.version == 0
