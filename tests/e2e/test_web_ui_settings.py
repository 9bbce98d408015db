"""A conversation's own settings (#32 item 6): Settings opens on the conversation in view;
what it sets there (max tokens, an answer format with a JSON schema, thinking) goes with
its requests only, the global settings stay the defaults of every other conversation, and
"Use the defaults again" brings them back; a file's count in the meter is the prompt the
model reads, to the token. On the bundled model (llama.cpp), which keeps to the schema
token by token and, having no thinking section, refuses to think in words; real
Chromium, desktop and phone; axe-core finds nothing in the dialog's new states.
Screenshots land in tests/e2e/artifacts/ (ui-settings-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import ServerProcess
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
from tests.e2e.test_web_ui_context import Frames
from tests.e2e.test_web_ui_keyboard import axe_violations

pytestmark = [pytest.mark.e2e]

SIZES = {"desktop": {}, "phone": {"width": 390, "height": 844}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
          "required": ["city"], "additionalProperties": False}


def settings(page: Page) -> Locator:
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog).to_be_visible()
    return dialog


def ask(page: Page, text: str, answers: int) -> None:
    composer(page).fill(text)
    page.get_by_role("button", name="Send message").click()
    expect(page.locator("article.message.assistant")).to_have_count(answers)
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=60_000)


@pytest.mark.parametrize("size", list(SIZES))
def test_a_conversation_keeps_its_own_settings(model_server: ServerProcess,
                                               open_page: OpenPage, size: str,
                                               tmp_path: Path) -> None:
    page = open_page(model_server.url, **SIZES[size])
    frames = Frames(page)
    page.reload()  # the socket opens again, watched
    wait_connected(page)
    # no conversation yet: the defaults, for every conversation
    dialog = settings(page)
    expect(dialog.get_by_role("tab")).to_have_count(0)
    dialog.get_by_label("Temperature").fill("0")
    dialog.get_by_label("Max tokens").fill("40")
    page.keyboard.press("Escape")
    ask(page, "Say hello.", 1)

    # this conversation's own: an answer in JSON that a schema allows, shorter
    dialog = settings(page)
    expect(dialog.get_by_role("tab", name="This conversation")).to_have_attribute(
        "aria-selected", "true")
    expect(dialog).to_contain_text("it follows the defaults")
    expect(dialog.get_by_label("Max tokens")).to_have_value("40")
    dialog.get_by_label("Answer format").select_option(label="JSON that a schema allows")
    schema = dialog.get_by_label("JSON schema")
    schema.fill("{not json")
    expect(dialog.get_by_role("alert")).to_contain_text("Not saved: not JSON")
    schema.fill(json.dumps(SCHEMA))
    expect(dialog.get_by_role("alert")).to_have_count(0)
    dialog.get_by_label("Max tokens").fill("30")
    expect(dialog.get_by_role("button", name="Use the defaults again")).to_be_visible()
    dialog.get_by_role("tab", name="This conversation").scroll_into_view_if_needed()
    shot(page, f"settings-conversation-{size}")
    assert axe_violations(page) == []
    page.keyboard.press("Escape")
    ask(page, "Name a city in France.", 2)
    answer = json.loads(last_answer(page).locator(".markdown").inner_text())
    assert set(answer) == {"city"} and isinstance(answer["city"], str), answer
    params = frames.generates()[-1]["params"]
    assert params["max_tokens"] == 30 and params["temperature"] == 0
    assert params["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": SCHEMA}}

    # another conversation has the defaults
    if size == "phone":
        page.get_by_role("button", name="Conversations").click()
    page.get_by_role("button", name="New conversation").click()
    # with a file: the meter's count of the draft (its parts, Anthropic's text blocks) is the
    # prompt the model reads (the parts joined) to the token
    (tmp_path / "names.csv").write_text("name,city\nAnna,Lyon\nBruno,Porto\n")
    page.get_by_label("Files to attach").set_input_files(str(tmp_path / "names.csv"))
    meter = page.get_by_role("meter", name="Context used")
    expect(meter).to_have_attribute("aria-valuetext", re.compile("with your message"))
    file_alone = meter.get_attribute("aria-valuenow")  # the file is a message by itself
    composer(page).fill("Say hello again.")
    # counted again with the text (meanwhile it reads 0: the new draft is not counted yet)
    expect(meter).to_have_attribute("aria-valuenow", re.compile(f"^(?!0$|{file_alone}$)[0-9]+$"))
    expect(meter).to_have_attribute("aria-valuetext", re.compile("with your message"))
    counted = int(meter.get_attribute("aria-valuenow") or "-1")
    ask(page, "Say hello again.", 1)
    params = frames.generates()[-1]["params"]
    assert params["max_tokens"] == 40 and "response_format" not in params
    assert frames.ends()[-1]["usage"]["prompt_tokens"] == counted

    # kept with the conversation through a reload; the defaults come back on request
    page.reload()
    if size == "phone":
        page.get_by_role("button", name="Conversations").click()
    page.get_by_role("button", name="Say hello.", exact=True).click()
    dialog = settings(page)
    expect(dialog.get_by_label("Max tokens")).to_have_value("30")
    dialog.get_by_label("Think before answering").check()
    page.keyboard.press("Escape")
    # a model without a thinking section refuses to think, and the page says so
    composer(page).fill("Think first: what is 2 + 2?")
    page.get_by_role("button", name="Send message").click()
    expect(last_answer(page)).to_have_attribute("data-status", "error")
    expect(last_answer(page).get_by_role("alert")).to_contain_text("think")
    assert frames.generates()[-1]["params"]["think"] is True
    dialog = settings(page)
    dialog.get_by_role("button", name="Use the defaults again").click()
    expect(dialog.get_by_label("Max tokens")).to_have_value("40")
    expect(dialog.get_by_label("Think before answering")).not_to_be_checked()
    expect(dialog.get_by_label("Answer format")).to_have_value("text")
