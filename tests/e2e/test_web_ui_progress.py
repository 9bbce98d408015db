"""The chat page while an answer has no token yet (#32 item 1): a long prompt's prefill as
a progress bar with tokens read of the total and the time left, the queue place, and the
time waited, on every streaming transport (WebSocket progress frames, `: prefill N/M` and
`: queued position=N` comments on SSE and Responses). The transports, the queue and the
phone on the fake engine's scripted prefill (`[[prefill_ms=N]]`, one sequence so a second
request waits); the bundled model (llama.cpp) reads a real long prompt. Screenshots land in
tests/e2e/artifacts/ (ui-progress-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.conftest import ServerProcess
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    LiveServer,
    OpenPage,
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
# What the page shows of a prefill, read every 50 ms into window.__prefill.
SAMPLER = """() => { window.__prefill = []; setInterval(() => {
  const bar = [...document.querySelectorAll('[role=progressbar]')].pop();
  const figures = [...document.querySelectorAll('.prefill-figures')].pop();
  if (bar) window.__prefill.push([Number(bar.getAttribute('aria-valuenow')),
    Number(bar.getAttribute('aria-valuemax')), figures ? figures.textContent : '']);
}, 50); }"""
# ~2,400 fake tokens read 512 at a time, 700 ms a step: about 3.5 s of prefill, then 20 tokens
FAKE_LONG = "[[prefill_ms=700]][[tokens=20]] " + "abcdef" * 800


@pytest.fixture(scope="module")
def one_slot() -> Iterator[ServerProcess]:
    """The fake engine with one sequence: a second request waits for the first."""
    server = ServerProcess(("--engine", "fake", "--parallel", "1"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def long_prompt(lines: int = 90) -> str:
    """About 1,250 tokens on the bundled model (13.5 a line): three steps of 512; a fresh tag
    first so no prompt cache shortens it."""
    body = "\n".join(f"Line {i}: the river runs past the old mill." for i in range(lines))
    return f"[{uuid.uuid4().hex}]\n{body}\nSay only: done."


def choose(page: Page, transport: str) -> None:
    page.get_by_role("radio", name=TRANSPORTS[transport]).check()
    if transport == "ws":
        wait_connected(page)


def stop_when_it_streams(page: Page, *, may_finish: bool = False) -> None:
    """Stops the answer once it streams; `may_finish`: a model's answer may be over before
    its streaming state is seen (8 tokens in 0.3 s once the prompt is read), and is then
    left done."""
    answer = last_answer(page)
    if may_finish:
        expect(answer).to_have_attribute("data-status", re.compile(r"^(streaming|done)$"),
                                         timeout=240_000)
        if answer.get_attribute("data-status") == "done":
            return
    else:
        expect(answer).to_have_attribute("data-status", "streaming", timeout=240_000)
    stop = page.get_by_role("button", name="Stop the answer")
    if not may_finish:
        stop.click()
        expect(answer).to_have_attribute("data-status", "stopped")
        return
    try:  # it may end between the look and the click: the button is then disabled
        stop.click(timeout=5_000)
    except PlaywrightTimeout:
        expect(answer).to_have_attribute("data-status", "done")
        return
    expect(answer).to_have_attribute("data-status", re.compile(r"^(stopped|done)$"))


def check_samples(page: Page, least_total: int) -> None:
    """The bar rose, never fell, with one total, and said its figures in words."""
    seen = page.evaluate("window.__prefill")
    done = [d for d, _, _ in seen]
    totals = {t for _, t, _ in seen}
    assert len(totals) == 1 and min(totals) > least_total, totals
    assert done == sorted(done) and len(set(done)) >= 2, done
    assert all(re.fullmatch(r"[\d,]+ / [\d,]+ tokens · .+", f) for _, _, f in seen), seen[-3:]


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_prefill_progress_and_queue_place(one_slot: ServerProcess, open_page: OpenPage,
                                          transport: str) -> None:
    page = open_page(one_slot.url)
    other = open_page(one_slot.url)
    choose(page, transport)
    choose(other, transport)
    page.evaluate(SAMPLER)
    send(page, FAKE_LONG)
    answer = last_answer(page)
    bar = answer.get_by_role("progressbar", name="Prompt read")
    expect(bar).to_be_visible()
    expect(answer.get_by_role("status")).to_contain_text("Reading your message")
    expect(answer.locator(".elapsed")).to_have_text(re.compile(r"^\d+ s$"))

    # a second page's request waits for the one sequence: its place and its wait, in words
    send(other, "Hello there")
    expect(last_answer(other).get_by_role("status")).to_contain_text("In the queue: position 1")
    expect(last_answer(other).locator(".elapsed")).to_have_text(re.compile(r"^\d+ s$"))
    expect(answer.locator(".prefill-figures")).to_contain_text(
        re.compile(r"about \d+ s left|almost done"))
    shot(page, f"progress-prefill-{transport}")
    if transport == "ws":
        shot(other, "progress-queued")
    expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
    check_samples(page, 2000)
    # the bar is gone with the first token; the other page's turn came
    expect(answer.get_by_role("progressbar")).to_have_count(0)
    expect(answer.locator(".elapsed")).to_have_count(0)
    expect(last_answer(other)).to_have_attribute("data-status", "done", timeout=20_000)


def test_prefill_progress_on_a_phone(one_slot: ServerProcess, open_page: OpenPage) -> None:
    page = open_page(one_slot.url, width=390, height=844)
    wait_connected(page)
    composer(page).fill(FAKE_LONG)
    page.get_by_role("button", name="Send message").click()  # Enter is a new line on touch
    bar = last_answer(page).get_by_role("progressbar", name="Prompt read")
    expect(bar).to_be_visible()
    expect(last_answer(page).locator(".prefill-figures")).to_contain_text(
        re.compile(r"left|almost done"))
    box = bar.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    expect(composer(page)).to_be_in_viewport()
    shot(page, "progress-prefill-phone")
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=20_000)


@pytest.mark.model
def test_the_bundled_model_reports_its_prefill(live_server: LiveServer,
                                               open_page: OpenPage) -> None:
    """llama.cpp reads a long prompt 512 tokens a step: the page shows each step."""
    page = open_page(live_server("--parallel", "1", "--ctx-size", "4096"))
    wait_connected(page)
    page.evaluate(SAMPLER)
    send(page, long_prompt())
    expect(last_answer(page).get_by_role("progressbar", name="Prompt read")).to_be_visible(
        timeout=120_000)
    stop_when_it_streams(page, may_finish=True)
    check_samples(page, 1024)
    shot(page, "progress-model-stopped")
