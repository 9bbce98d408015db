"""The chat page (#19): nothing lost by a click, answers that survive reloads and drops,
phone and touch, figures, and the smaller points; real Chromium against a real server on
the fake engine. Screenshots land in tests/e2e/artifacts/ (ui-chat-*.png)."""

# ruff: noqa: F811  (the page fixtures of test_web_ui are imported, then asked for by name)
from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tests.e2e.test_web_ui import (  # noqa: F401  (fixtures, asked for by name)
    FAST,
    PACED,
    LiveServer,
    OpenPage,
    answer_text,
    browser,
    built_ui,
    composer,
    expect_answer_text,
    last_answer,
    open_page,
    previous_version,
    regenerate,
    send,
    shot,
    wait_connected,
    wait_for_answer_text,
)

PHONE = {"width": 390, "height": 844}


def versions(page: Page, nth: int = -1) -> str:
    group = page.locator("article.message.assistant").nth(nth).locator(".versions")
    return group.locator(".version-count").inner_text() if group.count() else "1/1"


def test_regenerate_and_edit_keep_versions(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    send(page, "First [[tokens=20]]")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    first = answer_text(page)

    regenerate(page)
    assert versions(page) == "2/2"
    previous_version(page, last_answer(page), "1/2")
    expect_answer_text(page, first)
    shot(page, "chat-versions-light")

    # an edit is a new version of the question, the old turn stays one step away
    page.locator("article.message.user").hover()
    page.get_by_role("button", name="Edit and resend this message").click()
    page.get_by_label("Edit your message").fill("Second [[tokens=5]]")
    page.get_by_role("button", name="Save and send").click()
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    expect(page.locator("article.message.user .bubble")).to_have_text("Second [[tokens=5]]")
    expect(page.locator("article.message.user .version-count")).to_have_text("2/2")
    page.get_by_role("button", name="Previous version of this message").click()
    expect(page.locator("article.message.user .bubble")).to_have_text("First [[tokens=20]]")
    assert versions(page) == "1/2", "the old question came back with the answer last shown"

    # Esc in the edit box puts focus back on the Edit button
    page.locator("article.message.user").hover()
    edit = page.get_by_role("button", name="Edit and resend this message")
    edit.click()
    page.get_by_label("Edit your message").press("Escape")
    expect(edit).to_be_focused()

    # the versions survive a reload
    page.wait_for_timeout(300)
    page.reload()
    expect(page.locator("article.message.user .version-count")).to_have_text("1/2")
    assert versions(page) == "1/2"


def test_deletions_can_be_undone(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    for text in ("Alpha topic", "Beta topic"):
        page.get_by_role("button", name="New conversation").click()
        send(page, f"{text} [[tokens=5]]")
        expect(last_answer(page)).to_have_attribute("data-status", "done")
    sidebar = page.get_by_role("navigation", name="Conversations")
    titles = sidebar.locator(".conversation-title")
    expect(titles).to_have_count(2)

    # one message: gone, then back
    page.get_by_role("button", name="Delete this answer").click()
    expect(page.locator("article.message.assistant")).to_have_count(0)
    toast = page.locator(".toast")
    expect(toast).to_contain_text("Deleted the answer")
    shot(page, "chat-undo-light")
    toast.get_by_role("button", name="Undo").click()
    expect(page.locator("article.message.assistant")).to_have_count(1)

    # a conversation: gone, then back
    sidebar.get_by_role("button", name=re.compile("Delete conversation “Beta")).click()
    expect(titles).to_have_count(1)
    page.locator(".toast").get_by_role("button", name="Undo").click()
    expect(titles).to_have_count(2)

    # all of them: asked first; Cancel keeps them
    sidebar.get_by_role("button", name="Delete all conversations").click()
    confirm = page.get_by_role("dialog", name="Delete all conversations?")
    expect(confirm).to_be_visible()
    shot(page, "chat-confirm-delete-all-light")
    confirm.get_by_role("button", name="Cancel").click()
    expect(titles).to_have_count(2)
    sidebar.get_by_role("button", name="Delete all conversations").click()
    confirm.get_by_role("button", name="Delete all").click()
    expect(titles).to_have_count(0)
    page.locator(".toast").get_by_role("button", name="Undo").click()
    expect(titles).to_have_count(2)

    # without Undo, the toast goes and the deletion stays, also after a reload
    sidebar.get_by_role("button", name=re.compile("Delete conversation “Alpha")).click()
    expect(page.locator(".toast")).to_have_count(0, timeout=10_000)
    page.reload()
    expect(page.get_by_role("navigation", name="Conversations").locator(
        ".conversation-title")).to_have_text(["Beta topic [[tokens=5]]"])


def test_search_marker_single_stop_and_system_prompt(
    live_server: LiveServer, open_page: OpenPage
) -> None:
    page = open_page(live_server(*PACED))
    wait_connected(page)
    page.get_by_role("button", name="Settings").click()
    page.get_by_label("System prompt for new conversations").fill("You answer in haiku.")
    page.keyboard.press("Escape")
    send(page, "Tell me about tokens [[tokens=10]]")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    expect(page.get_by_label("System prompt of this conversation")).to_contain_text(
        "You answer in haiku.")

    page.get_by_role("button", name="New conversation").click()
    send(page, "Something else [[tokens=400]]")
    wait_for_answer_text(page, 10)
    sidebar = page.get_by_role("navigation", name="Conversations")
    marker = sidebar.locator("li", has_text="Something else").locator(".sidebar-streaming")
    expect(marker).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("Stop"))).to_have_count(1)
    expect(last_answer(page).locator(".stats")).to_contain_text("tokens")  # live figures
    shot(page, "chat-streaming-light")
    page.get_by_role("button", name="Stop the answer").click()
    expect(last_answer(page)).to_have_attribute("data-status", "stopped")
    expect(sidebar.locator(".sidebar-streaming")).to_have_count(0)

    search = sidebar.get_by_role("searchbox", name="Search conversations")
    search.fill("TOKENS about")
    expect(sidebar.locator(".conversation-title")).to_have_text(
        ["Tell me about tokens [[tokens=10]]"])
    search.fill("nothing like this")
    expect(sidebar).to_contain_text("No conversation holds")
    sidebar.get_by_role("button", name="Clear the search").click()
    expect(sidebar.locator(".conversation-title")).to_have_count(2)


def test_settings_say_when_a_value_is_out_of_range(
    live_server: LiveServer, open_page: OpenPage
) -> None:
    page = open_page(live_server(*FAST), scheme="dark")
    wait_connected(page)
    send_button = page.get_by_role("button", name="Send message")
    expect(send_button).to_be_disabled()
    colors = send_button.evaluate(
        "el => [getComputedStyle(el).backgroundColor, getComputedStyle(el).opacity]")
    accent = page.evaluate(
        "() => { const b = document.createElement('button'); b.className = 'button-primary';"
        " document.body.append(b); const c = getComputedStyle(b).backgroundColor;"
        " b.remove(); return c; }")
    assert colors[0] != accent, f"the disabled Send button has the live accent {accent}"
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    dialog.get_by_label("Temperature").fill("5")
    expect(dialog.get_by_role("alert")).to_contain_text("Not saved: from 0 to 2")
    dialog.get_by_label("Top k").fill("40")
    dialog.get_by_label("Min p").fill("0.05")
    dialog.get_by_label("Repetition penalty").fill("1.1")
    dialog.get_by_label("Stop strings").fill("Here")
    shot(page, "chat-settings-dark")
    page.keyboard.press("Escape")
    # the sampling settings reach the server: the stop string ends the answer before it
    send(page, "Hello [[tokens=40]]")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done")
    assert answer_text(page).strip() == "Hello!"


TABLE = (
    "[[echo]] | Name | Transport | Description |\n| --- | --- | --- |\n"
    "| WebSocket | tokenpipe.v1 | streamed with queue position and resume |\n"
    "| Server-sent | OpenAI | chat completions streamed as events |\n"
)


def test_phone_tables_header_and_touch_targets(
    live_server: LiveServer, open_page: OpenPage
) -> None:
    page = open_page(live_server(*FAST, "--model", "alpha=fake:a", "--model", "beta=fake:b"),
                     **PHONE)
    wait_connected(page)
    composer(page).fill(TABLE)
    page.get_by_role("button", name="Send message").click()
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    cells = page.locator("article.message.assistant td, article.message.assistant th")
    expect(cells.first).to_be_visible()
    broken = cells.evaluate_all(
        "els => els.filter(el => el.getClientRects().length !== 1 ||"
        " el.getBoundingClientRect().height > 2 * parseFloat(getComputedStyle(el).lineHeight))"
        ".map(el => el.textContent)")
    assert broken == [], f"cells wrap: {broken}"
    scroller = page.locator(".table-scroll")
    assert scroller.evaluate("el => el.scrollWidth > el.clientWidth"), "the table does not scroll"
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px"

    title = page.locator(".chat-title").bounding_box()
    assert title and title["width"] >= 200, f"the title is squeezed to {title}"
    small = page.evaluate(
        """() => [...document.querySelectorAll('main button, main select, main .segmented span')]
            .filter(el => el.offsetParent !== null && !el.closest('.visually-hidden'))
            .map(el => [el.getAttribute('aria-label') || el.textContent.trim(),
                        el.getBoundingClientRect()])
            .filter(([, r]) => r.width > 0 && (r.width < 44 || r.height < 44))
            .map(([name, r]) => `${name}: ${Math.round(r.width)}x${Math.round(r.height)}`)"""
    )
    assert small == [], f"touch targets under 44 px: {small}"
    expect(page.get_by_label("Model for the next answers")).to_be_visible()
    shot(page, "chat-phone-table-light")


def test_answer_survives_a_reload(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server("--engine", "fake", "--fake-pace-ms", "8"))
    wait_connected(page)
    send(page, "Long one [[tokens=300]]")
    wait_for_answer_text(page, 40)
    page.wait_for_timeout(1200)  # the conversation, with its stream token, is saved each second
    page.reload()
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
    resumed = answer_text(page)
    expect(answer.locator(".badge-interrupted")).to_have_count(0)
    # the same request undisturbed: the resumed answer lost and repeated nothing
    regenerate(page)
    assert answer_text(page) == resumed


def test_an_answer_the_server_forgot_offers_retry_from_here(
    live_server: LiveServer, browser: Browser
) -> None:
    base = live_server("--engine", "fake", "--fake-pace-ms", "10", "--resume-grace-s", "0.5")
    line = {"down": False}

    def proxy(route: WebSocketRoute) -> None:
        if line["down"]:
            route.close(code=1013, reason="the test keeps the line down")
        else:
            route.connect_to_server()

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.route_web_socket(re.compile(r".*/ws$"), proxy)
        page.goto(base)
        wait_connected(page)
        send(page, "Talk [[tokens=400]]")
        wait_for_answer_text(page, 30)
        page.wait_for_timeout(1200)  # saved with its stream token
        line["down"] = True
        page.reload()  # the old socket goes; the new one cannot get through for a while
        expect(page.locator(".connection[data-status=reconnecting]")).to_be_visible()
        page.wait_for_timeout(1500)  # past the server's grace: the answer is forgotten
        line["down"] = False
        page.get_by_role("button", name="Retry now").dispatch_event("click")
        answer = last_answer(page)
        expect(answer).to_have_attribute("data-status", "interrupted")
        expect(answer.locator(".badge-interrupted")).to_contain_text("no longer has this answer")
        partial = answer_text(page)
        assert partial
        shot(page, "chat-unresumable-light")
        answer.get_by_role("button", name="Retry from here").click()
        expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=20_000)
        assert versions(page) == "2/2"
        # the partial answer is kept as the previous version
        previous_version(page, last_answer(page), "1/2")
        expect_answer_text(page, partial)
    finally:
        context.close()
