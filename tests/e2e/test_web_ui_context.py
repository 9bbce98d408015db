"""The chat page's context meter, max tokens "fit" and the overflow offer (#19 item 1):
real Chromium against a real server on the bundled model (llama.cpp), with a small
--ctx-size so that a conversation reaches its context in a few long messages. Sized from
the contract (`hello.limits.context_tokens`, count_tokens), not from a number.
Screenshots land in tests/e2e/artifacts/ (ui-context-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, Request, WebSocket, expect

from tests.conftest import ServerProcess, running
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    OpenPage,
    browser,
    built_ui,
    composer,
    last_answer,
    open_page,
    shot,
    shot_both_schemes,
    wait_connected,
)

MAX_TOKENS = 24  # short answers: the prompts fill the context
# an offer is shown once its ways on are counted exactly: a dozen count_tokens calls over
# the whole conversation, which a loaded suite run once took longer than 15 s to answer
OFFER_MS = 60_000
SENTENCE = "Tokens fill the context of this small model one sentence at a time, and then more. "
VIEWPORTS = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    # the default tiered cache: two streams of 512, a shared 1024 one conversation may fill
    # (what limits.context_tokens says)
    with running(ServerProcess(("--parallel", "2", "--ctx-size", "2048"))) as process:
        yield process


def count(base: str, text: str) -> int:
    body = {"messages": [{"role": "user", "content": text}]}
    response = httpx.post(f"{base}/v1/messages/count_tokens", json=body, timeout=30)
    response.raise_for_status()
    tokens: int = response.json()["input_tokens"]
    return tokens


def long_message(base: str, tokens: int, tag: int) -> str:
    """A user message of about `tokens` tokens (counted by the server's own tokenizer)."""
    head = f"Message {tag}: summarise this in one line. "
    one, eleven = count(base, head + SENTENCE), count(base, head + SENTENCE * 11)
    per = (eleven - one) / 10
    return head + SENTENCE * max(1, round((tokens - one) / per) + 1)


def meter(page: Page) -> Locator:
    return page.get_by_role("meter", name="Context used")


def meter_value(page: Page) -> int:
    return int(meter(page).get_attribute("aria-valuenow") or "-1")


class Frames:
    """The tokenpipe.v1 frames the page sends and gets (generate, end), as parsed JSON."""

    def __init__(self, page: Page) -> None:
        self.sent: list[dict[str, Any]] = []
        self.got: list[dict[str, Any]] = []
        page.on("websocket", self._watch)

    def _watch(self, socket: WebSocket) -> None:
        socket.on("framesent", lambda data: self._keep(self.sent, data))
        socket.on("framereceived", lambda data: self._keep(self.got, data))

    @staticmethod
    def _keep(into: list[dict[str, Any]], data: str | bytes) -> None:
        frame = json.loads(data)
        if isinstance(frame, dict) and frame.get("type") in {"generate", "end"}:
            into.append(frame)

    def generates(self) -> list[dict[str, Any]]:
        return [f for f in self.sent if f["type"] == "generate"]

    def ends(self) -> list[dict[str, Any]]:
        return [f for f in self.got if f["type"] == "end"]


def watch_counts(page: Page) -> None:
    """Each count request's end and time, in a failing test's captured output (the offers
    wait on them)."""
    started: dict[int, float] = {}

    def start(request: Request) -> None:
        if "count_tokens" in request.url:
            started[id(request)] = time.perf_counter()

    def end(request: Request, how: str) -> None:
        if id(request) in started:
            took = time.perf_counter() - started.pop(id(request))
            print(f"[count] {time.strftime('%X')} {how} in {took * 1000:.0f} ms")

    page.on("request", start)
    page.on("requestfinished", lambda request: end(request, "answered"))
    page.on("requestfailed", lambda request: end(request, f"failed ({request.failure})"))


def type_draft(page: Page, text: str) -> int:
    """Types `text` and waits for the meter to count it; the count it shows."""
    composer(page).fill(text)
    expect(meter(page)).to_have_attribute("aria-valuetext", re.compile("with your message"),
                                          timeout=15_000)
    return meter_value(page)


def submit(page: Page) -> None:
    # the button: on a touch keyboard Enter makes a new line
    page.get_by_role("button", name="Send message").click()


def wait_done(page: Page, answers: int) -> None:
    expect(page.locator("article.message.assistant")).to_have_count(answers)
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=60_000)


def fill_until_offer(page: Page, frames: Frames, base: str, size: int, first_tag: int,
                     name: str) -> int:
    """Long messages, each answered, until the page offers a way on instead of sending."""
    offer = page.get_by_role("alertdialog", name="This message would not fit")
    for tag in range(first_tag, first_tag + 8):
        answers = page.locator("article.message.assistant").count()
        before = meter_value(page) if meter(page).count() else 0
        counted = type_draft(page, long_message(base, size, tag))
        assert counted > before, f"the draft's count {counted} is not above {before}"
        sent = len(frames.generates())
        submit(page)
        page.wait_for_function(
            "n => document.querySelectorAll('article.message.assistant').length > n"
            " || document.querySelector('.overflow-offer') !== null", arg=answers)
        if offer.count():
            assert len(frames.generates()) == sent, "a message that overflows was sent"
            expect(page.locator("article.message.assistant")).to_have_count(answers)
            assert composer(page).input_value().startswith(f"Message {tag}:")
            return tag
        wait_done(page, answers + 1)
        # exact: what the meter counted for the draft is the prompt the answer was given
        usage = frames.ends()[-1]["usage"]
        assert usage["prompt_tokens"] == counted, (usage, counted)
        expect(meter(page)).to_have_attribute(
            "aria-valuenow", str(usage["prompt_tokens"] + usage["completion_tokens"]))
        assert meter_value(page) > before, "the meter did not grow after the answer"
        shot(page, f"context-meter-{tag}-{name}")
    raise AssertionError("no overflow offer after 8 long messages")


def edit_and_regenerate_are_checked(page: Page, frames: Frames, name: str) -> None:
    """An edit or a regenerate that would overflow is held back the same way as a send."""
    offer = page.get_by_role("alertdialog", name="This message would not fit")
    draft = composer(page).input_value()
    offer.get_by_role("button", name="Keep editing").click()
    expect(offer).to_have_count(0)
    sent = len(frames.generates())
    question = page.locator("article.message.user").last
    question.hover()
    question.get_by_role("button", name="Edit and resend this message").click()
    page.get_by_label("Edit your message").fill(draft + " " + draft)
    print(f"[step] {time.strftime('%X')} save and send an edit that overflows")
    # the event itself, not a click at a point: the button moves as the edited text grows
    # the box, which a loaded page may do after the click's point was taken
    page.get_by_role("button", name="Save and send").dispatch_event("click")
    expect(offer).to_be_visible(timeout=OFFER_MS)
    assert len(frames.generates()) == sent, "an edit that overflows was sent"
    offer.get_by_role("button", name="Keep editing").click()

    # an answer of up to 600 tokens must fit whole: regenerating the last one does not
    page.get_by_role("button", name="Settings").click()
    page.get_by_role("dialog", name="Settings").get_by_label("Max tokens").fill("600")
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog", name="Settings")).to_be_hidden()
    print(f"[step] {time.strftime('%X')} regenerate with max tokens 600")
    # the event itself: the list moves back as the settings panel goes
    page.get_by_role("button", name="Regenerate the answer").last.dispatch_event("click")
    offer = page.get_by_role("alertdialog", name="A new answer would not fit")
    expect(offer).to_contain_text("the answer needs at least 600", timeout=OFFER_MS)
    assert len(frames.generates()) == sent, "a regenerate that overflows was sent"
    shot(page, f"context-offer-regenerate-{name}")
    offer.get_by_role("button", name="Keep editing").click()
    page.get_by_role("button", name="Settings").click()
    page.get_by_role("dialog", name="Settings").get_by_label("Max tokens").fill(str(MAX_TOKENS))
    page.keyboard.press("Escape")
    expect(composer(page)).to_have_value(draft)


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_meter_fit_and_overflow_offer(server: ServerProcess, open_page: OpenPage,
                                      viewport: str) -> None:
    width, height = VIEWPORTS[viewport]
    page = open_page(server.url, width=width, height=height)
    frames = Frames(page)
    watch_counts(page)
    page.reload()  # the socket opens again, watched (it may have opened before Frames)
    wait_connected(page)
    context = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"][0]["max_model_len"]

    # max tokens is "fit" by default: the first message goes without max_tokens
    page.get_by_role("button", name="Settings").click()
    field = page.get_by_role("dialog", name="Settings").get_by_label("Max tokens")
    expect(field).to_have_value("")
    expect(field).to_have_attribute("placeholder", "fit")
    page.keyboard.press("Escape")
    composer(page).fill("Say hello in three words.")
    expect(meter(page)).to_have_attribute("aria-valuemax", str(context))
    submit(page)
    wait_done(page, 1)
    assert "max_tokens" not in frames.generates()[0].get("params", {})
    first = meter_value(page)
    usage = frames.ends()[0]["usage"]
    assert first == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    shot_both_schemes(page, f"context-meter-{viewport}")

    # then short answers, set by the user for every conversation (the defaults): sent as
    # set, and they must fit whole
    page.get_by_role("button", name="Settings").click()
    page.get_by_role("dialog", name="Settings").get_by_role("tab", name="Defaults").click()
    page.get_by_role("dialog", name="Settings").get_by_label("Max tokens").fill(str(MAX_TOKENS))
    page.keyboard.press("Escape")

    size = int(context * 0.3)
    tag = fill_until_offer(page, frames, server.url, size, 1, viewport)
    assert all(f["params"].get("max_tokens") == MAX_TOKENS for f in frames.generates()[1:])
    offer = page.get_by_role("alertdialog", name="This message would not fit")
    expect(offer).to_contain_text("Turn 1: “Say hello in three words.”", timeout=OFFER_MS)
    shot_both_schemes(page, f"context-offer-{viewport}")
    edit_and_regenerate_are_checked(page, frames, viewport)
    submit(page)  # the draft, once more: the offer is back

    # drop the turns ticked, the largest (not the first, small one): the message goes, and
    # its answer arrives whole
    expect(offer).to_contain_text("Turn 1: “Say hello in three words.”", timeout=OFFER_MS)
    expect(offer.get_by_role("checkbox", name=re.compile("^Turn 1:"))).not_to_be_checked()
    ticked = offer.get_by_role("checkbox", checked=True)
    dropped_turns = ticked.count()
    labels = [ticked.nth(i).locator("xpath=..").inner_text() for i in range(dropped_turns)]
    gone = [found.group(0) for found in map(re.compile(r"Message \d+:").search, labels) if found]
    assert dropped_turns >= 1 and len(gone) == dropped_turns, labels
    expect(offer.get_by_role("status")).to_contain_text(
        re.compile(f"leaving [\\d,]+ of {context:,} for the answer"))
    drop = offer.get_by_role("button", name=re.compile(r"^Drop \d+ turns? and send$"))
    answers = page.locator("article.message.assistant").count()
    drop.click()
    wait_done(page, answers + 1)
    expect(offer).to_have_count(0)
    expect(composer(page)).to_have_value("")
    folded = page.locator("details.dropped-turns")
    expect(folded).to_have_count(1)
    expect(folded.locator("summary")).to_have_text(
        f"{dropped_turns} earlier turn{'s' if dropped_turns > 1 else ''} dropped from the"
        " model's context")
    assert folded.get_attribute("open") is None, "the dropped turns are not folded"
    # the model no longer sees them; it still sees the first, small turn
    prompt = frames.generates()[-1]["messages"]
    assert not any(m["content"].startswith(g) for m in prompt for g in gone), gone
    assert any("Say hello in three words." in m["content"] for m in prompt)
    assert prompt[-1]["content"].startswith(f"Message {tag}:")
    usage = frames.ends()[-1]["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= context
    shot(page, f"context-dropped-{viewport}")
    folded.locator("summary").click()
    expect(folded.locator("article.message.user").first).to_contain_text(gone[0])
    shot(page, f"context-dropped-open-{viewport}")

    # again until the offer, then a new conversation that carries the draft
    tag = fill_until_offer(page, frames, server.url, size, tag + 1, viewport)
    draft = composer(page).input_value()
    page.get_by_role("alertdialog").get_by_role("button", name="Start a new conversation").click()
    expect(page.locator("h1.chat-title")).to_have_text("New conversation")
    expect(page.locator("article.message")).to_have_count(0)
    expect(composer(page)).to_have_value(draft)
    shot(page, f"context-new-conversation-{viewport}")
    submit(page)
    wait_done(page, 1)
    assert frames.generates()[-1]["messages"][-1]["content"] == draft
    expect(meter(page)).to_have_attribute("aria-valuemax", str(context))
