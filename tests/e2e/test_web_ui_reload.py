"""Nothing lost to a reload (#32 item 3): a page reloaded 0.2 s and 0.6 s after Send and in
the middle of the answer finds its conversation whole and the answer complete, nothing
lost and nothing repeated, on every streaming transport (WebSocket `resume`, SSE resumed
with `GET /v1/streams/TOKEN`, Responses in the background resumed with `starting_after`);
a typed draft survives too. Real Chromium against a real server: the fake engine (its
answer to a prompt is fixed, so the whole answer can be compared) and the bundled model.
Screenshots land in tests/e2e/artifacts/ (ui-reload-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ServerProcess
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    OpenPage,
    answer_text,
    browser,
    built_ui,
    composer,
    last_answer,
    open_page,
    send,
    shot,
    wait_connected,
)

pytestmark = [pytest.mark.e2e]

TRANSPORTS = {"ws": "WebSocket", "sse": "SSE", "responses": "Responses"}
PROMPT = "Tell me everything [[tokens=160]]"  # 160 tokens, 12 ms apart: about 2 s


@pytest.fixture(scope="module")
def paced() -> Iterator[ServerProcess]:
    server = ServerProcess(("--engine", "fake", "--fake-pace-ms", "12"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def choose(page: Page, transport: str) -> None:
    page.get_by_role("radio", name=TRANSPORTS[transport]).check()
    if transport == "ws":
        wait_connected(page)


def answered(page: Page, transport: str, prompt: str, reload_at: float | str | None,
             timeout: float = 30_000) -> str:
    """Send `prompt`, reload at `reload_at` (seconds after Send, or "mid": once some text
    is in), and return the answer once done; the conversation must be one turn, whole."""
    choose(page, transport)
    send(page, prompt)
    sent = time.monotonic()
    if reload_at == "mid":
        page.wait_for_function(
            "() => (document.querySelector('.assistant .markdown')?.textContent ?? '').length"
            " > 30")
        page.reload()
    elif reload_at is not None:
        page.wait_for_timeout(max(0.0, float(reload_at) - (time.monotonic() - sent)) * 1000)
        page.reload()
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=timeout)
    expect(page.locator("article.message.user .bubble")).to_have_text(prompt)
    expect(page.locator("article.message")).to_have_count(2)
    expect(answer.locator(".version-count")).to_have_count(0)  # one version: not asked twice
    expect(answer.locator(".badge-interrupted")).to_have_count(0)
    titles = page.get_by_role("navigation", name="Conversations").locator(".conversation-title")
    expect(titles).to_have_count(1)
    return answer_text(page)


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_reload_loses_nothing(paced: ServerProcess, open_page: OpenPage,
                                transport: str) -> None:
    reference = answered(open_page(paced.url), transport, PROMPT, None)
    assert len(reference) > 200, reference
    for when in (0.2, 0.6, "mid"):
        page = open_page(paced.url)
        got = answered(page, transport, PROMPT, when)
        assert got == reference, (transport, when, got[:200], reference[:200])
        if when == "mid":
            shot(page, f"reload-resumed-{transport}")


def test_a_draft_survives_a_reload(paced: ServerProcess, open_page: OpenPage) -> None:
    page = open_page(paced.url)
    wait_connected(page)
    composer(page).fill("A question I am still typing")
    page.reload()
    expect(composer(page)).to_have_value("A question I am still typing")
    send(page, "First [[tokens=5]]")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    # each conversation keeps its own draft; a sent one leaves none behind
    composer(page).fill("More about that")
    page.get_by_role("button", name="New conversation").click()
    expect(composer(page)).to_have_value("")
    page.reload()
    page.get_by_role("navigation", name="Conversations").locator(".conversation-title").click()
    expect(composer(page)).to_have_value("More about that")


@pytest.mark.model
@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_the_bundled_model_resumes_mid_answer(model_server: ServerProcess,
                                              open_page: OpenPage, transport: str) -> None:
    """Greedy decoding on the split KV cache: the answer after a reload is the one a page
    left alone gets, token for token."""
    def greedy_page() -> Page:
        page = open_page(model_server.url)
        page.get_by_role("button", name="Settings").click()
        page.get_by_label("Temperature").fill("0")
        page.get_by_label("Max tokens").fill("80")
        page.keyboard.press("Escape")
        return page

    prompt = "List ten rivers of Europe, one per line, with a short note on each."
    reference = answered(greedy_page(), transport, prompt, None, timeout=120_000)
    got = answered(greedy_page(), transport, prompt, "mid", timeout=120_000)
    assert got == reference, (got, reference)
