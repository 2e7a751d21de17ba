"""End to end in headless Chromium: a crisis message shows the fixed safety reply with crisis lines
and no persona reply; the decision is logged (tier only) for the researcher's Safety tab."""

from __future__ import annotations

import pytest

from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.group.engine import Engine, EngineConfig
from mascot.safety.events import SafetyLog
from tests.conftest import new_page, open_chat, send_message, served

pytestmark = pytest.mark.browser


def test_crisis_message_shows_safety_reply_and_no_persona(browser, port, tmp_path):
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port)
    log = SafetyLog(settings.safety_log)  # where the served chat records its checks
    fake = FakeBackend()
    with served(settings, Engine(EngineConfig(backend="fake"), fake)) as base, new_page(browser) as page:
        open_chat(page, base)
        send_message(page, "I bought a rope today and I'm going to use it tonight.")
        page.locator("#chatbot").get_by_text("116 123").wait_for(timeout=60_000)
        text = page.locator("#chatbot").inner_text()
        assert "Safety" in text and "988" in text and "findahelpline.com" in text
        assert page.locator("#chatbot .persona-name").count() == 0 and "Director →" not in text
        assert fake.calls == []  # no persona (and no director) was ever asked
        assert log.tier_counts() == {"crisis": 1}
        page.screenshot(path=str(tmp_path / "safety-crisis.png"), full_page=True)


def test_method_with_a_time_gets_the_crisis_reply_and_an_idiom_gets_the_group(browser, port, tmp_path):
    """A method with a time and a place (no word of dying) gets the crisis reply; "killing time" gets the group's
    replies (at most a safety question from Anchor, never the crisis reply)."""
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port)
    log = SafetyLog(settings.safety_log)
    fake = FakeBackend()
    with served(settings, Engine(EngineConfig(backend="fake"), fake)) as base, new_page(browser) as page:
        open_chat(page, base)
        send_message(page, "just killing time before my flight, 3 hours to go")
        page.locator("#chatbot .persona-name").nth(2).wait_for(timeout=60_000)  # the three personas answered
        page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('▍')", timeout=60_000)
        assert "**Safety**" not in page.locator("#chatbot").inner_text() and "crisis" not in log.tier_counts()
        asked = len(fake.calls)
        send_message(page, "I'm going to crash my car into a wall on purpose on the way home tomorrow.")
        page.locator("#chatbot").get_by_text("Samaritans on").last.wait_for(timeout=60_000)
        page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('findahelpline.com**') "
                               "|| document.querySelector('#chatbot').innerText.includes('Elsewhere: find')")
        assert log.tier_counts().get("crisis") == 1 and len(fake.calls) == asked  # no persona asked after the crisis
        page.screenshot(path=str(tmp_path / "safety-method-idiom.png"), full_page=True)
