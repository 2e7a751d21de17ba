"""Fixtures for browser tests: a headless Debian Chromium via Playwright (never `playwright install`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The shared helpers live one folder up (tests/annotation_fixtures.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("browser: needs a headless Chromium", "slow: takes more than a few seconds"):
        config.addinivalue_line("markers", marker)


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium, skipped when Playwright or the Debian chromium package is missing."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()
