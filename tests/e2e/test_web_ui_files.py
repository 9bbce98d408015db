"""The chat page's files and conversations (#32 item 5): text files picked, dropped or pasted
long become chips with their size in tokens and go as text parts that name them (what the
model reads: the fake engine's [[echo]] says it back); an image is refused in words; one
conversation is exported as JSON (every version, its settings) and Markdown, all of them as
JSON, and imported in a browser that has none; a file that is not an export is refused.
The draft keeps its files through a reload.
Real Chromium against a real server on the fake engine, desktop and phone; axe-core finds
nothing in the new states. Screenshots land in tests/e2e/artifacts/ (ui-files-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

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
from tests.e2e.test_web_ui_keyboard import axe_violations

pytestmark = [pytest.mark.e2e]

NOTES = "# Notes\n\nThe lighthouse keeper counts ships.\n"
CSV = "city,ships\nBrest,12\nCadiz,7\n"
PASTE = "log line: the storm came in from the west\n" * 80  # over 2,500 characters
SIZES = {"desktop": {}, "phone": {"width": 390, "height": 844}}


def sidebar(page: Page, phone: bool) -> None:
    if phone:
        page.get_by_role("button", name="Conversations").click()


def drop_file(page: Page, name: str, text: str) -> None:
    """A file dropped on the composer, as a browser's drag and drop delivers it."""
    page.evaluate(
        """([name, text]) => { const data = new DataTransfer();
        data.items.add(new File([text], name, {type: 'text/plain'}));
        const form = document.querySelector('form.composer');
        const init = {dataTransfer: data, bubbles: true, cancelable: true};
        form.dispatchEvent(new DragEvent('dragover', init));
        form.dispatchEvent(new DragEvent('drop', init)); }""",
        [name, text])


def paste(page: Page, text: str) -> None:
    composer(page).focus()
    page.evaluate(
        """text => { const data = new DataTransfer(); data.setData('text/plain', text);
        const init = {clipboardData: data, bubbles: true, cancelable: true};
        document.getElementById('composer-input').dispatchEvent(
            new ClipboardEvent('paste', init)); }""",
        text)


def download(page: Page, click: Any) -> tuple[str, str]:
    with page.expect_download() as info:
        click()
    path = info.value.path()
    return info.value.suggested_filename, Path(path).read_text()


@pytest.mark.parametrize("size", list(SIZES))
def test_files_as_chips_and_conversations_out_and_back(fake_server: ServerProcess,
                                                       open_page: OpenPage, size: str,
                                                       tmp_path: Path) -> None:
    phone = size == "phone"
    page = open_page(fake_server.url, **SIZES[size])
    wait_connected(page)

    # picked: text files are taken, an image is refused in words
    (tmp_path / "notes.md").write_text(NOTES)
    (tmp_path / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    page.get_by_label("Files to attach").set_input_files(
        [str(tmp_path / "notes.md"), str(tmp_path / "cat.png")])
    chips = page.get_by_role("list", name="Files to send")
    expect(chips.get_by_role("listitem")).to_have_count(1)
    expect(page.get_by_role("alert")).to_contain_text("cat.png: this model reads text only")
    # dropped, and a long paste: chips too, the box stays empty
    drop_file(page, "ships.csv", CSV)
    paste(page, PASTE)
    expect(chips.get_by_role("listitem")).to_have_count(3)
    expect(composer(page)).to_have_value("")
    for item in chips.get_by_role("listitem").all():  # each counted by the server
        expect(item.locator(".attachment-size")).to_have_text(re.compile(r"^[\d,]+ tokens$"))
    expect(chips).to_contain_text("pasted.txt")
    composer(page).fill("[[echo]] What do these say?")
    shot(page, f"files-chips-{size}")
    assert axe_violations(page) == []
    # the draft keeps its files through a reload, with the text
    page.reload()
    wait_connected(page)
    expect(chips.get_by_role("listitem")).to_have_count(3)
    expect(composer(page)).to_have_value("[[echo]] What do these say?")

    # sent as text parts that name them: the model reads each file under its name
    page.get_by_role("button", name="Send message").click()
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    answer = last_answer(page).inner_text()
    for name, text in (("notes.md", "The lighthouse keeper counts ships."),
                       ("ships.csv", "Brest,12"), ("pasted.txt", "the storm came in")):
        assert f'<file name="{name}">' in answer and text in answer, (name, answer[:300])
    assert re.match(r'What do these say\?\s+<file name="notes.md">', answer), answer[:100]
    expect(chips).to_have_count(0)  # the files went with the message
    sent = page.locator("article.message.user").get_by_role("list", name="Attached files")
    expect(sent.get_by_role("listitem")).to_have_count(3)
    sent.get_by_text("ships.csv").click()  # a chip opens to show the file
    expect(sent.locator("details[open] .attachment-text")).to_have_text(CSV)
    shot(page, f"files-sent-{size}")

    # one conversation out: JSON with every version and its settings, and Markdown
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog.get_by_role("tab", name="This conversation")).to_have_attribute(
        "aria-selected", "true")
    dialog.get_by_label("Temperature").fill("0.3")  # its own setting goes with it
    name, text = download(page, lambda: dialog.get_by_role(
        "button", name="JSON (every version, settings)").click())
    exported = json.loads(text)
    assert name == "echo-what-do-these-say.json"
    assert exported["format"] == "tokenpipe.conversations" and exported["version"] == 1
    [conversation] = exported["conversations"]
    assert conversation["settings"] == {"temperature": 0.3}
    assert [a["name"] for a in conversation["messages"][0]["attachments"]] == [
        "notes.md", "ships.csv", "pasted.txt"]
    name, markdown = download(page, lambda: dialog.get_by_role("button", name="Markdown").click())
    assert name.endswith(".md") and markdown.startswith("# [[echo]] What do these say?")
    assert "Attached `ships.csv`:" in markdown and "## Assistant" in markdown
    page.keyboard.press("Escape")

    # all of them out, then into a browser that has none
    sidebar(page, phone)
    _, everything = download(page, lambda: page.get_by_role("button", name="Export all").click())
    (tmp_path / "all.json").write_text(everything)
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    other = open_page(fake_server.url, **SIZES[size])
    wait_connected(other)
    sidebar(other, phone)
    other.get_by_label("Conversations file to import").set_input_files(str(tmp_path / "bad.json"))
    expect(other.get_by_role("alert")).to_contain_text(
        "Nothing imported from bad.json: the file is not an export of this page")
    other.get_by_label("Conversations file to import").set_input_files(str(tmp_path / "all.json"))
    expect(other.get_by_role("status").filter(has_text="Imported")).to_have_text(
        "Imported 1 conversation from all.json.")
    shot(other, f"files-imported-{size}")
    assert axe_violations(other) == []
    if phone:
        other.keyboard.press("Escape")
    expect(other.locator("h1.chat-title")).to_have_text("[[echo]] What do these say?")
    expect(other.locator("article.message.user").get_by_role("listitem")).to_have_count(3)
    expect(last_answer(other)).to_contain_text("Brest,12")
    other.reload()  # written to this browser's IndexedDB
    expect(other.locator("article.message.user").get_by_role("listitem")).to_have_count(3)
