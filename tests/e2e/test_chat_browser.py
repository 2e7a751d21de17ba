"""End to end in headless Chromium: open the app, send a message, see replies from two personas."""

from __future__ import annotations

import pytest

from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.group.engine import Engine, EngineConfig
from tests.conftest import new_page, open_chat, send_message, served

pytestmark = pytest.mark.browser


def _engine(kind: str) -> Engine:
    if kind == "fake":
        return Engine(EngineConfig(backend="fake"), FakeBackend(chunk_size=3))
    return Engine.load(EngineConfig())  # the embedded SmolLM2 with the shipped adapters


@pytest.mark.parametrize("kind", ["fake", pytest.param("embedded", marks=pytest.mark.model)])
def test_send_message_and_see_two_personas(browser, port, tmp_path, kind):
    settings = Settings(data_dir=str(tmp_path), backend=kind, mode="round-robin", port=port, max_speakers=2)
    dialogs: list[str] = []
    with served(settings, _engine(kind)) as base, new_page(browser) as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        open_chat(page, base)
        send_message(page, "I failed my driving test <script>alert('x')</script>")
        bot = page.locator("#chatbot .persona-name")
        bot.nth(1).wait_for(timeout=120_000)  # the second persona's bubble
        page.wait_for_function(
            "() => !document.querySelector('#chatbot').innerText.includes('▍')", timeout=180_000)
        names = [n.strip() for n in bot.all_inner_texts()]
        assert any("Anchor" in n for n in names) and any("Catalyst" in n for n in names), names
        chat_text = page.locator("#chatbot").inner_text()
        assert "<script>alert('x')</script>" in chat_text  # shown literally, never executed
        assert dialogs == []
        assert "Director → Anchor" in chat_text
        page.screenshot(path=str(tmp_path / f"chat-{kind}.png"), full_page=True)


def test_empty_message_shows_notice_and_sends_nothing(browser, port, tmp_path):
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port)
    fake = FakeBackend()
    with served(settings, Engine(EngineConfig(backend="fake"), fake)) as base, new_page(browser) as page:
        open_chat(page, base)
        send_message(page, "   ")
        page.locator("#notice").get_by_text("Your message is empty").wait_for(timeout=15_000)
        assert fake.calls == [] and page.locator("#chatbot .persona-name").count() == 0


def test_a_message_refused_as_busy_returns_to_the_box(browser, port, tmp_path):
    """Two tabs of one client: while the first tab's turn runs, the second tab's message is refused as busy and
    comes back into its box (and leaves its chat), so the person sends it again without retyping it."""
    import time

    from mascot.backends.fake import echo_responder

    def slow(messages, params, adapter):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return echo_responder(messages, params, adapter)

    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="round-robin", port=port)
    engine = Engine(EngineConfig(backend="fake"), FakeBackend(responder=slow))
    with served(settings, engine) as base, new_page(browser) as first, new_page(browser) as second:
        for page in (first, second):
            open_chat(page, base)
        send_message(first, "My sister moved abroad and the flat is so quiet.")
        first.locator("#chatbot .persona-name").first.wait_for(timeout=60_000)  # its turn is running
        text = "I keep thinking about the exam I failed."
        send_message(second, text)
        second.wait_for_function(f"() => document.querySelector('#msg textarea').value === {text!r}", timeout=30_000)
        assert text not in second.locator("#chatbot").inner_text()  # the unsent message left the chat
