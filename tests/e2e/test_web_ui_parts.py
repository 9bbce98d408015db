"""The chat page shows the parts of an answer (#17 item 6, #19 item 8): the thinking folded
above the answer, tool calls as cards; real Chromium against real servers (the fake engine
scripts a thinking section; tool calls need a grammar, so the bundled model makes them).
Screenshots land in tests/e2e/artifacts/ (ui-parts-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import json
import re
import signal
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import ServerProcess, free_port
from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    LiveServer,
    OpenPage,
    answer_text,
    browser,
    built_ui,
    last_answer,
    open_page,
    send,
    shot,
    shot_both_schemes,
    wait_connected,
    wait_for_answer_text,
)
from tests.e2e.test_web_ui_keyboard import axe_violations

THOUGHT = ("The user greets me. A greeting deserves a greeting back, short and kind; "
           "no need for a long answer here, so one line will do.")
ANSWER = "Hello to you too!"
# the fake engine echoes it in 1 to 3 byte tokens, one every 25 ms: about 3 s of thinking
THINKING = f"[[echo]][[pace_ms=25]]<think>{THOUGHT}</think>\n\n{ANSWER}"


def reasoning(page: Page) -> tuple[str, str]:
    toggle = last_answer(page).locator(".reasoning-toggle")
    return toggle.inner_text(), str(toggle.get_attribute("aria-expanded"))


def check_folded_thinking(page: Page, name: str) -> None:
    answer = last_answer(page)
    toggle = answer.get_by_role("button", name=re.compile("^Thinking…|^Thought"))
    # open while the thinking streams, with the thinking in it and no answer yet
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(toggle).to_have_text("Thinking…")
    thought = answer.get_by_role("region", name="The model's thinking")
    page.wait_for_function(
        "() => (document.querySelector('.assistant .reasoning-text')?.textContent ?? '')"
        ".length > 40")
    assert answer.locator(".markdown").count() == 0, "the answer came with the thinking"
    shot(page, f"parts-thinking-{name}")
    # folded once the answer starts, saying how long it took
    expect(toggle).to_have_attribute("aria-expanded", "false", timeout=20_000)
    expect(toggle).to_have_text(re.compile(r"^Thought for (less than a second|\d+(\.\d)? s)$"))
    expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
    assert answer_text(page).strip() == ANSWER
    assert "<think>" not in answer.inner_text()
    shot(page, f"parts-thought-folded-{name}")
    toggle.click()
    expect(thought).to_have_text(THOUGHT)
    shot_both_schemes(page, f"parts-thought-open-{name}")


def test_thinking_is_folded_above_the_answer_and_kept(
    live_server: LiveServer, open_page: OpenPage
) -> None:
    page = open_page(live_server("--engine", "fake"))
    wait_connected(page)
    send(page, THINKING)
    check_folded_thinking(page, "ws")
    label = reasoning(page)[0]
    took = re.search(r"(\d+(?:\.\d)?) s$", label)
    seconds = float(took.group(1)) if took else 0.0
    assert 1.0 <= seconds <= 20.0, f"{label}: the thinking took about 3 s to arrive"

    # kept with the message: after a reload, folded again, the same text and time
    page.wait_for_timeout(1200)
    page.reload()
    expect(last_answer(page).locator(".reasoning-toggle")).to_have_text(label)
    assert reasoning(page)[1] == "false"
    last_answer(page).locator(".reasoning-toggle").click()
    expect(last_answer(page).locator(".reasoning-text")).to_have_text(THOUGHT)

    # the OpenAI SSE transport brings it apart too (reasoning_content)
    page.get_by_role("button", name="New conversation").click()
    page.get_by_role("radio", name="SSE").check()
    send(page, THINKING)
    check_folded_thinking(page, "sse")


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}]


def test_tool_calls_show_as_cards_on_the_model(live_server: LiveServer,
                                               open_page: OpenPage) -> None:
    page = open_page(live_server("--parallel", "1", "--ctx-size", "2048"))
    wait_connected(page)
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    tools = dialog.get_by_label("Tools (JSON, OpenAI shape)")
    tools.fill('[{"type": "function"}]')  # not saved, and says why
    expect(dialog.get_by_role("alert")).to_contain_text("Not saved: tool 1")
    tools.fill(json.dumps(WEATHER))
    expect(dialog.get_by_role("alert")).to_have_count(0)
    dialog.get_by_label("Tool choice").select_option("required")
    dialog.get_by_label("Several calls in one answer").uncheck()  # the small model repeats it
    dialog.get_by_label("Max tokens").fill("100")
    shot(page, "parts-tools-settings")
    page.keyboard.press("Escape")

    check_one_call(page, "What is the weather in Paris right now?")
    shot_both_schemes(page, "parts-tool-call")
    # the OpenAI SSE transport brings the calls as delta.tool_calls fragments
    page.get_by_role("button", name="New conversation").click()
    page.get_by_role("radio", name="SSE").check()
    check_one_call(page, "What is the weather in Rome?")
    answer_the_call(page)

    # the tools stay in Settings after a reload
    page.reload()
    page.get_by_role("button", name="Settings").click()
    stored = page.get_by_role("dialog", name="Settings").get_by_label(
        "Tools (JSON, OpenAI shape)").input_value()
    assert json.loads(stored) == WEATHER


def check_one_call(page: Page, question: str) -> None:
    send(page, question)
    answer = last_answer(page)
    cards = answer.get_by_role("region", name="Tool call get_weather")
    expect(cards.first).to_be_visible(timeout=60_000)
    expect(answer).to_have_attribute("data-status", "done", timeout=60_000)
    assert cards.count() == 1
    ids = set()
    for card in cards.all():
        shown = card.locator(".tool-call-arguments").inner_text()
        arguments = json.loads(shown)  # each card shows valid JSON ...
        assert set(arguments) == {"city"} and isinstance(arguments["city"], str), arguments
        assert shown == json.dumps(arguments, indent=2, ensure_ascii=False)  # pretty-printed
        ids.add(card.locator(".tool-call-id").inner_text())
    assert len(ids) == cards.count() and all(i.startswith("call_") for i in ids), ids
    expect(answer.locator(".badge-tool-calls")).to_have_text(
        "The model called a tool: type what it returned, and the model goes on from it.")


def answer_the_call(page: Page) -> None:
    """The result typed by hand goes back after the call (#32 item 6): the model answers
    from it, and the card keeps it."""
    bodies: list[dict[str, Any]] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data or "{}"))
            if r.url.endswith("/v1/chat/completions") else None)
    called = page.locator("article.message.assistant").first  # the first answer: it stays
    card = called.get_by_role("region", name="Tool call get_weather")
    call_id = card.locator(".tool-call-id").inner_text()
    send_result = called.get_by_role("button", name="Send the result")
    expect(send_result).to_be_disabled()
    # this conversation lets the model choose (the defaults require a call): it may answer
    page.get_by_role("button", name="Settings").click()
    page.get_by_role("dialog", name="Settings").get_by_label("Tool choice").select_option("auto")
    page.keyboard.press("Escape")
    result = '{"temperature_c": 18, "sky": "clear"}'
    card.get_by_label("Result of get_weather").fill(result)
    shot(page, "parts-tool-result")
    assert axe_violations(page) == []
    send_result.click()
    expect(page.locator("article.message.assistant")).to_have_count(2)
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=60_000)
    expect(card.locator(".tool-call-result pre")).to_have_text(result)
    expect(send_result).to_have_count(0)
    messages = bodies[-1]["messages"]
    assert messages[-2]["role"] == "assistant"
    assert [c["id"] for c in messages[-2]["tool_calls"]] == [call_id]
    assert messages[-1] == {"role": "tool", "tool_call_id": call_id, "content": result}
    assert bodies[-1]["tool_choice"] == "auto"  # this conversation's own
    shot(page, "parts-tool-loop")


def test_an_answer_through_the_responses_transport(live_server: LiveServer,
                                                    open_page: OpenPage) -> None:
    page = open_page(live_server("--engine", "fake", "--fake-pace-ms", "5"))
    page.get_by_role("radio", name="Responses").check()
    bodies: list[dict[str, object]] = []
    deletes: list[str] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data or "{}"))
            if r.url.endswith("/v1/responses") else None)
    page.on("request", lambda r: deletes.append(r.url) if r.method == "DELETE" else None)
    send(page, "Hello over Responses [[tokens=60]]")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
    # in the background (so a reload resumes it), stored until the page has read it all
    assert bodies and bodies[0]["stream"] is True and bodies[0]["background"] is True, bodies
    assert answer_text(page).startswith("Hello! Here is a streamed answer.")
    stats = answer.locator(".stats").inner_text()
    # what this page measured over Responses: the tokens (from usage), a rate, first token
    assert stats.endswith("Responses") and "60 tokens" in stats, stats
    assert re.search(r"first token \d+ ms", stats) and "tokens/s" in stats, stats
    assert "measured by the browser" in str(answer.locator(".stats").get_attribute("title"))
    shot(page, "parts-transport-responses")

    # Stop deletes the background response (which cancels it) and closes the request; the
    # page says Stopped and stays usable
    send(page, "A long one [[tokens=3000]]")
    page.wait_for_function(
        "() => ([...document.querySelectorAll('.assistant .markdown')].pop()?.textContent ?? '')"
        ".length > 40")
    page.get_by_role("button", name="Stop the answer").click()
    expect(last_answer(page)).to_have_attribute("data-status", "stopped")
    kept = answer_text(page)
    page.wait_for_timeout(300)
    assert answer_text(page) == kept, "the answer kept growing after Stop"
    assert len(deletes) == 2 and all("/v1/responses/resp_" in url for url in deletes), deletes


def test_continue_after_a_server_restart(browser: Browser, built_ui: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # the page knows the server by its address: the new one takes it over
    monkeypatch.setattr("tests.conftest.free_port", lambda: port)
    args = ("--engine", "fake", "--fake-pace-ms", "10")
    servers = [ServerProcess(args)]
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        servers[0].wait_ready()
        page = context.new_page()
        page.set_default_timeout(20_000)
        sent: list[dict[str, Any]] = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda f: sent.append(json.loads(f))
                                              if isinstance(f, str) and '"generate"' in f
                                              else None))
        page.goto(servers[0].url)
        wait_connected(page)
        # plain prose (the fake engine echoes it): what the page shows is the text itself
        send(page, "[[echo]] " + "tokens flow one by one, " * 60)
        wait_for_answer_text(page, 60)
        servers[0].stop(signal.SIGKILL)  # gone mid-answer, with the answer it was keeping
        servers.append(ServerProcess(args))
        servers[1].wait_ready()
        answer = last_answer(page)
        # the page reconnects, asks to resume, and the new server knows nothing of it
        expect(answer).to_have_attribute("data-status", "interrupted")
        expect(answer.locator(".badge-interrupted")).to_contain_text("no longer has this answer")
        partial = answer_text(page).rstrip()
        assert 60 < len(partial) < 60 * len("tokens flow one by one, "), partial
        shot(page, "parts-continue-offered")

        answer.get_by_role("button", name="Continue this answer").click()
        # the fake engine goes on with an answer begun as its own (here: the echo), as a
        # model goes on with its text: more of the echo, up to max_tokens (~5 s)
        expect(answer).to_have_attribute("data-status", "done", timeout=30_000)
        grown = answer_text(page)
        assert grown.startswith(partial) and len(grown) > len(partial), (partial, grown)
        assert ("tokens flow one by one, " * 60).startswith(grown.strip()), grown[-80:]
        expect(page.locator("article.message")).to_have_count(2)  # the same turn, no new one
        # it went as the partial answer in the last, assistant, message of the conversation
        last = sent[-1]["messages"]
        assert [m["role"] for m in last] == ["user", "assistant"], last
        assert last[-1]["content"].rstrip() == partial, (last[-1], partial)
        shot(page, "parts-continued")
    finally:
        context.close()
        for server in servers:
            server.stop()
