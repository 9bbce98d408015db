"""The chat page's header on a phone (#32 item 7): one compact row (menu, title, the
connection in a word, Settings), the transport switch moved into Settings; real Chromium
against a real server on the fake engine. Screenshots in tests/e2e/artifacts/
(ui-phone-header-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    FAST,
    LiveServer,
    OpenPage,
    browser,
    built_ui,
    composer,
    last_answer,
    open_page,
    shot,
    wait_connected,
)

pytestmark = [pytest.mark.e2e]


def test_the_phone_header_is_one_compact_row(live_server: LiveServer,
                                              open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST), width=390, height=844)
    wait_connected(page)
    header = page.locator(".chat-header").bounding_box()
    assert header is not None and header["height"] <= 60, header  # it was 116 px
    # the connection in words, said to screen readers
    expect(page.locator(".chat-header .connection")).to_have_text("Connected")
    expect(page.get_by_role("radio", name="SSE")).to_have_count(0)  # not in the header
    shot(page, "phone-header-light")

    # the transport is in Settings
    page.get_by_role("button", name="Settings").click()
    settings = page.get_by_role("dialog", name="Settings")
    settings.get_by_role("radio", name="SSE").check()
    shot(page, "phone-header-settings")
    page.keyboard.press("Escape")
    composer(page).fill("Over SSE from a phone [[tokens=8]]")
    page.get_by_role("button", name="Send message").click()
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    expect(last_answer(page).locator(".stats")).to_contain_text("SSE")

    # a desktop keeps the switch in its header, and Settings does not repeat it
    wide = open_page(page.url)
    expect(wide.get_by_role("radio", name="SSE")).to_be_visible()
    wide.get_by_role("button", name="Settings").click()
    expect(wide.get_by_role("dialog", name="Settings").get_by_role("radio")).to_have_count(0)
