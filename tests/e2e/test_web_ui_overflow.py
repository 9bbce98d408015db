"""The overflow offer never loops (#32 item 4): the turns to drop come with their sizes, the
largest ticked first, any other choice counted again, and what the plan leaves said; a
message too long by itself is cut to its first and last part (in the message, or attached as
a file with room for a question), never sent back to a new conversation where it would not
fit either. Real Chromium against a real server on the fake engine with a 1,024-token
context (the counts are the server's; the bundled model's context test is
test_web_ui_context.py), desktop and phone. Screenshots: tests/e2e/artifacts/ui-overflow-*."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import ServerProcess, running
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    OpenPage,
    browser,
    built_ui,
    composer,
    last_answer,
    open_page,
    shot,
    wait_connected,
)
from tests.e2e.test_web_ui_context import Frames, long_message
from tests.e2e.test_web_ui_keyboard import axe_violations

pytestmark = [pytest.mark.e2e]

CONTEXT = 1024
SHORT = "[[tokens=4]] "  # the fake engine's answers stay short: the questions fill the context
SIZES = {"desktop": {}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def small_context() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--ctx-size", str(CONTEXT)))) as server:
        yield server


def ask(page: Page, text: str, answers: int) -> None:
    composer(page).fill(text)
    page.get_by_role("button", name="Send message").click()
    expect(page.locator("article.message.assistant")).to_have_count(answers)
    expect(last_answer(page)).to_have_attribute("data-status", "done")


def offer_for(page: Page, text: str) -> Locator:
    composer(page).fill(text)
    page.get_by_role("button", name="Send message").click()
    offer = page.get_by_role("alertdialog", name="This message would not fit")
    expect(offer).to_be_visible()
    return offer


def turn(offer: Locator, number: int) -> Locator:
    return offer.get_by_role("checkbox", name=re.compile(f"^Turn {number}:"))


@pytest.mark.parametrize("size", list(SIZES))
def test_every_way_on_fits(small_context: ServerProcess, open_page: OpenPage,
                           size: str) -> None:
    base = small_context.url
    page = open_page(base, **SIZES[size])
    frames = Frames(page)
    page.reload()  # the socket opens again, watched
    wait_connected(page)
    big = SHORT + long_message(base, 480, 2)
    ask(page, SHORT + "Hi there", 1)
    ask(page, big, 2)
    ask(page, SHORT + "And a short one", 3)

    # the largest turn is ticked, not the two oldest; each turn says its size
    offer = offer_for(page, SHORT + long_message(base, 470, 4))
    expect(turn(offer, 2)).to_be_checked()
    expect(turn(offer, 1)).not_to_be_checked()
    expect(turn(offer, 3)).not_to_be_checked()
    sizes = [int(t.replace(",", "").split()[0])
             for t in offer.locator(".overflow-size").all_inner_texts()]
    assert sizes[1] > 400 > sizes[0] + sizes[2], sizes
    plan = offer.get_by_role("status")
    expect(plan).to_contain_text(re.compile(r"leaving [\d,]+ of 1,024 for the answer"))
    drop = offer.get_by_role("button", name="Drop 1 turn and send")
    expect(drop).to_be_focused()
    shot(page, f"overflow-turns-{size}")
    assert axe_violations(page) == []
    # another choice is counted again: the oldest alone is not enough
    turn(offer, 2).uncheck()
    turn(offer, 1).check()
    expect(plan).to_contain_text("tick more")
    expect(offer.get_by_role("button", name="Drop 1 turn and send")).to_be_disabled()
    turn(offer, 1).uncheck()
    turn(offer, 2).check()
    sent = len(frames.generates())
    offer.get_by_role("button", name="Drop 1 turn and send").click()
    expect(page.locator("article.message.assistant")).to_have_count(4)
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    prompt = [m["content"] for m in frames.generates()[sent]["messages"]]
    assert big not in prompt and SHORT + "Hi there" in prompt, prompt
    usage = frames.ends()[-1]["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= CONTEXT

    # too long by itself: no new conversation (it would not fit there either); its ends fit
    huge = SHORT + long_message(base, 1500, 5)
    offer = offer_for(page, huge)
    expect(offer).to_contain_text("too long by itself")
    expect(offer.get_by_role("button", name="Start a new conversation")).to_have_count(0)
    keep = offer.get_by_role("button", name=re.compile(r"^Keep the first and last [\d,]+ tokens$"))
    expect(keep).to_be_focused()
    shot(page, f"overflow-too-long-{size}")
    assert axe_violations(page) == []
    # attached as a file, cut with room for a question: the question goes
    offer.get_by_role("button", name="Attach as a file").click()
    expect(offer).to_have_count(0)
    chip = page.get_by_role("list", name="Files to send").get_by_role("listitem")
    expect(chip).to_contain_text("message.txt")
    expect(chip).to_contain_text(re.compile(r"tokens, cut from [\d.]+ KB"))
    expect(composer(page)).to_have_value("")
    shot(page, f"overflow-attached-{size}")
    ask(page, SHORT + "What is this about?", 5)
    assert "characters cut here to fit the context" in (
        frames.generates()[-1]["messages"][-1]["content"])

    # or its ends kept in the message itself, the earlier turns dropped (with them its ends
    # would be a few words)
    offer = offer_for(page, huge)
    expect(offer).to_contain_text("every earlier turn is dropped")
    offer.get_by_role("button", name=re.compile("^Keep the first and last")).click()
    expect(page.locator("article.message.assistant")).to_have_count(6)
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    expect(composer(page)).to_have_value("")
    question = page.locator("article.message.user").last
    expect(question).to_contain_text("characters cut here to fit the context")
    prompt = frames.generates()[-1]["messages"]
    assert len(prompt) == 1, prompt  # every earlier turn dropped
    sent_text = prompt[0]["content"]
    assert sent_text.startswith(huge[:200]) and sent_text.endswith(huge[-200:])
    usage = frames.ends()[-1]["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= CONTEXT
