"""Continue where answers end short (#32 item 2): an answer cut at the max tokens limit,
one stopped, and one the user edited by hand all offer Continue, which sends the answer as
the last, assistant, message (the server continues it as a prefill) and grows the same
turn; the bundled model (llama.cpp) on a real server, desktop and phone. Screenshots land in
tests/e2e/artifacts/ (ui-continue-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ServerProcess
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    OpenPage,
    answer_text,
    browser,
    built_ui,
    composer,
    expect_answer_text,
    last_answer,
    open_page,
    previous_version,
    send,
    shot,
    wait_connected,
)

pytestmark = [pytest.mark.e2e, pytest.mark.model]


def generates(page: Page) -> list[dict[str, Any]]:
    """The tokenpipe.v1 generate frames the page sends, as they go."""
    sent: list[dict[str, Any]] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda f: sent.append(json.loads(f))
                                          if isinstance(f, str) and '"generate"' in f
                                          else None))
    return sent


def set_max_tokens(page: Page, n: int) -> None:
    page.get_by_role("button", name="Settings").click()
    page.get_by_label("Max tokens").fill(str(n))
    page.keyboard.press("Escape")


def continue_grows(page: Page, sent: list[dict[str, Any]]) -> str:
    """Continue the last answer: the same turn grows from its text, sent as a prefill."""
    answer = last_answer(page)
    before = answer_text(page).rstrip()
    answer.get_by_role("button", name="Continue this answer").click()
    expect(answer).not_to_have_attribute("data-status", re.compile("waiting|streaming"),
                                         timeout=120_000)
    grown = answer_text(page)
    assert grown.startswith(before) and len(grown) > len(before), (before, grown)
    last = sent[-1]["messages"]
    assert last[-1]["role"] == "assistant", last
    # what went is the answer's text; the page shows it as Markdown (a line break: a space)
    assert " ".join(last[-1]["content"].split()) == " ".join(before.split()), last
    return grown


def test_continue_after_the_token_limit_and_after_stop(model_server: ServerProcess,
                                                       open_page: OpenPage) -> None:
    page = open_page(model_server.url)
    sent = generates(page)
    page.reload()  # the socket opens again, watched (it may have opened before generates)
    wait_connected(page)
    set_max_tokens(page, 12)
    send(page, "Tell me a long story about a cat who sails around the world.")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=120_000)
    expect(answer.locator(".badge-stopped")).to_have_text("Cut at the max tokens limit")
    shot(page, "continue-offered-length")
    continue_grows(page, sent)
    expect(page.locator("article.message")).to_have_count(2)  # the same turn, no new one

    # Stopped: the same offer
    set_max_tokens(page, 400)
    send(page, "Now write a very long poem about the sea, with many verses.")
    # the new answer's own text, not the one before it (once, Stop went before it began)
    expect(page.locator("article.message.assistant")).to_have_count(2)
    page.wait_for_function(
        "() => ([...document.querySelectorAll('article.assistant')].pop()"
        "?.querySelector('.markdown')?.textContent ?? '').length > 20", timeout=120_000)
    page.get_by_role("button", name="Stop the answer").click()
    expect(last_answer(page)).to_have_attribute("data-status", "stopped")
    expect(last_answer(page).get_by_role("button", name="Continue this answer")).to_be_visible()
    set_max_tokens(page, 12)
    continue_grows(page, sent)
    expect(page.locator("article.message")).to_have_count(4)


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_edit_an_answer_then_continue_from_the_edit(model_server: ServerProcess,
                                                    open_page: OpenPage, size: str) -> None:
    page = open_page(model_server.url, **({"width": 390, "height": 844} if size == "phone"
                                          else {}))
    sent = generates(page)
    page.reload()  # the socket opens again, watched (it may have opened before generates)
    wait_connected(page)
    set_max_tokens(page, 12)
    composer(page).fill("Write one sentence about Paris.")
    page.get_by_role("button", name="Send message").click()
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=120_000)
    original = answer_text(page)

    answer.get_by_role("button", name="Edit this answer").click()
    editor = page.get_by_label("Edit the answer")
    expect(editor).to_be_focused()
    expect(editor).to_have_value(original)
    # Esc leaves the answer as it was, focus back on Edit
    editor.press("Escape")
    expect(last_answer(page).get_by_role("button", name="Edit this answer")).to_be_focused()
    last_answer(page).get_by_role("button", name="Edit this answer").click()
    mine = "Paris, the city of light, is famous for"
    page.get_by_label("Edit the answer").fill(mine)
    shot(page, f"continue-editing-{size}")
    page.get_by_role("button", name="Save and continue").click()
    answer = last_answer(page)
    expect(answer).not_to_have_attribute("data-status", re.compile("waiting|streaming"),
                                         timeout=120_000)
    grown = answer_text(page)
    assert grown.startswith(mine) and len(grown) > len(mine), grown
    assert sent[-1]["messages"][-1] == {"role": "assistant", "content": mine}, sent[-1]
    # the model's own answer is a version away
    expect(answer.locator(".version-count")).to_have_text("2/2")
    shot(page, f"continue-from-edit-{size}")
    previous_version(page, answer, "1/2")
    expect_answer_text(page, original)

    # Save alone keeps the edit, says so, and offers Continue
    last_answer(page).get_by_role("button", name="Edit this answer").click()
    page.get_by_label("Edit the answer").fill("Paris is")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(last_answer(page).locator(".badge-edited")).to_contain_text("Edited by you")
    expect(last_answer(page).locator(".version-count")).to_have_text("3/3")
    expect(last_answer(page).get_by_role("button", name="Continue this answer")).to_be_visible()
