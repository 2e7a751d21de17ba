"""In headless Chromium with the default `trained` director mode: one ordinary message gets replies from
two distinct personas, chosen by the (fake-scored) trained director adapter."""

from __future__ import annotations

import pytest

from app.settings import Settings
from mascot.backends.fake import FakeBackend
from mascot.group.engine import Engine, EngineConfig
from tests.conftest import new_page, open_chat, send_message, served
from tests.test_chat import prefer

pytestmark = pytest.mark.browser


def test_one_message_gets_every_persona_in_trained_mode(browser, port, tmp_path):
    fake = FakeBackend(chunk_size=3, scorer=prefer("none", "Beacon", "Catalyst", "Anchor"))
    fake.add_adapter("director", str(tmp_path / "director"))  # what Engine.attach_adapters registers
    settings = Settings(data_dir=str(tmp_path), backend="fake", mode="trained", port=port)
    with served(settings, Engine(EngineConfig(backend="fake"), fake)) as base, new_page(browser) as page:
        open_chat(page, base)
        send_message(page, "I moved to a new city and I feel lonely in the evenings.")
        bot = page.locator("#chatbot .persona-name")
        bot.nth(1).wait_for(timeout=120_000)
        page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('▍')", timeout=120_000)
        names = [n.strip() for n in bot.all_inner_texts()]
        # the trained director picks the order (its scorer prefers Beacon, then Catalyst) and may give the floor
        # back only once every active persona has answered (LLM_MIN_SPEAKERS = 3)
        assert len(names) == 3 and "Beacon" in names[0] and "Catalyst" in names[1] and "Anchor" in names[2], names
        assert "Director → Beacon" in page.locator("#chatbot").inner_text()
        # speaker, action and tone are all scored through the director's adapter
        assert fake.score_calls and {c.adapter for c, _ in fake.score_calls} == {"director"}
