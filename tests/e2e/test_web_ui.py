"""The web chat UI in a real Chromium against a real `tokenpipe serve` on the fake engine.

Screenshots of the main states land in tests/e2e/artifacts/ (light and dark).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    WebSocketRoute,
    expect,
    sync_playwright,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.conftest import ServerProcess

pytestmark = pytest.mark.e2e
# What the page shows after a round trip to the server (a count of the draft, an answer's
# first token) may wait behind other workers' tests on 2 cores: 15 s, as a page's actions
# (open_page), not Playwright's 5 s. Every browser test module imports this one.
expect.set_options(timeout=15_000)

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
STATIC_INDEX = ROOT / "src" / "tokenpipe" / "server" / "static" / "index.html"
ARTIFACTS = ROOT / "tests" / "e2e" / "artifacts"
CHROMIUM = os.environ.get("TOKENPIPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FAST = ("--engine", "fake", "--fake-pace-ms", "2")
PACED = ("--engine", "fake", "--fake-pace-ms", "20")
LiveServer = Callable[..., str]
Scheme = Literal["light", "dark"]


def _newest_source_mtime() -> float:
    sources = [
        *(WEB / "src").rglob("*"),
        WEB / "index.html",
        WEB / "vite.config.ts",
        WEB / "package-lock.json",
    ]
    return max(path.stat().st_mtime for path in sources if path.is_file())


@pytest.fixture(scope="session")
def built_ui() -> None:
    """The server serves the UI from its static folder: build it when the sources are newer."""
    if STATIC_INDEX.is_file() and STATIC_INDEX.stat().st_mtime >= _newest_source_mtime():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed to build the web UI in web/ (Node 20 or newer)")
    if not (WEB / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)
    subprocess.run([npm, "run", "build"], cwd=WEB, check=True)


@pytest.fixture(scope="module")  # Playwright's loop must stop before async tests run
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


OpenPage = Callable[..., Page]


@pytest.fixture
def open_page(browser: Browser, built_ui: None) -> Iterator[OpenPage]:
    """open_page(url, width=1280, height=800, scheme='light') -> a page in a fresh profile."""
    contexts: list[BrowserContext] = []

    def open_(url: str, width: int = 1280, height: int = 800, scheme: Scheme = "light") -> Page:
        context = browser.new_context(
            viewport={"width": width, "height": height},
            color_scheme=scheme,
            is_mobile=width < 500,
            has_touch=width < 500,
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        # what the page says went wrong, in a failing test's captured output
        page.on("pageerror", lambda error: print(f"[page error] {error}"))
        page.on("console", lambda message: print(f"[console {message.type}] {message.text}")
                if message.type in {"error", "warning"} else None)
        page.goto(url)
        return page

    yield open_
    for context in contexts:
        context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"))


def shot_both_schemes(page: Page, name: str) -> None:
    schemes: tuple[Scheme, ...] = ("light", "dark")
    for scheme in schemes:
        page.emulate_media(color_scheme=scheme)
        page.wait_for_timeout(50)
        shot(page, f"{name}-{scheme}")
    page.emulate_media(color_scheme="light")


def composer(page: Page) -> Locator:
    return page.get_by_role("textbox", name="Your message", exact=True)


def send(page: Page, text: str) -> None:
    composer(page).fill(text)
    composer(page).press("Enter")


def last_answer(page: Page) -> Locator:
    return page.locator("article.message.assistant").last


def regenerate(page: Page, version: str = "2/2", timeout: float = 20_000) -> None:
    """Regenerate the last answer and wait for the new version to finish (the old answer
    stays "done" while the page counts the prompt first: wait for the version, then it)."""
    page.get_by_role("button", name="Regenerate the answer").click()
    expect(last_answer(page).locator(".version-count")).to_have_text(version, timeout=timeout)
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=timeout)


def wait_connected(page: Page) -> None:
    expect(page.locator(".connection[data-status=open]")).to_be_visible()


def previous_version(page: Page, answer: Locator, count: str) -> None:
    """Show the previous version of `answer` and wait until the page shows it: a click
    returns before the page has drawn the version it switched to."""
    answer.get_by_role("button", name="Previous version of this answer").click()
    expect(answer.locator(".version-count")).to_have_text(count)


def expect_answer_text(page: Page, text: str) -> None:
    """The last answer's text becomes exactly `text` (its inner text, as answer_text reads it)
    within 5 s; if not, the assertion shows what it is."""
    try:
        page.wait_for_function(
            "t => { const all = document.querySelectorAll('article.message.assistant .markdown');"
            " return all.length > 0 && all[all.length - 1].innerText === t; }",
            arg=text,
            timeout=5_000,
        )
    except PlaywrightTimeoutError:
        pass
    assert answer_text(page) == text


def answer_text(page: Page) -> str:
    locator = page.locator("article.message.assistant .markdown").last
    return locator.inner_text() if locator.count() else ""


def wait_for_answer_text(page: Page, more_than: int) -> None:
    page.wait_for_function(
        "n => (document.querySelector('.assistant .markdown')?.textContent ?? '').length > n",
        arg=more_than,
    )


def require_openai_routes(base: str) -> None:
    status = httpx.get(f"{base}/v1/models", timeout=5).status_code
    if status == 404:
        pytest.xfail("the server has no OpenAI HTTP routes yet (GET /v1/models is 404)")
    assert status == 200, f"GET /v1/models answered {status}"


def test_answer_streams_visibly_as_markdown(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*PACED))
    wait_connected(page)
    shot_both_schemes(page, "empty")
    send(page, "Show me some code")
    expect(page.locator("article.message.assistant .markdown")).to_be_visible()
    lengths = []
    for _ in range(6):
        lengths.append(len(answer_text(page)))
        page.wait_for_timeout(150)
    assert lengths == sorted(lengths) and len(set(lengths)) >= 4, (
        f"text did not grow steadily: {lengths}"
    )
    shot(page, "streaming-light")
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=20_000)

    answer = last_answer(page)
    assert "日本語も大丈夫です" in answer.inner_text()
    assert "🎉🚀👩‍💻" in answer.inner_text()
    expect(answer.locator(".code-block .code-language")).to_have_text("python")
    expect(answer.locator(".code-block .hljs-keyword").first).to_be_visible()
    expect(answer.get_by_role("button", name="Copy python code")).to_be_visible()
    expect(answer.locator("h2")).to_have_text("Code")
    expect(answer.locator("li")).to_have_count(2)
    stats = answer.locator(".stats").inner_text()
    assert (
        re.search(r"first token \d+ ms", stats) and "tokens/s" in stats and "WebSocket" in stats
    ), stats
    shot_both_schemes(page, "answer")


def test_stop_regenerate_and_edit(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*PACED))
    wait_connected(page)
    send(page, "A long one please [[tokens=3000]]")
    wait_for_answer_text(page, 40)
    page.get_by_role("button", name="Stop the answer").click()
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "stopped")
    expect(answer.locator(".badge-stopped")).to_have_text("Stopped")
    kept = answer_text(page)
    page.wait_for_timeout(500)
    assert answer_text(page) == kept, "the answer kept growing after Stop"
    assert len(kept) > 40
    expect(composer(page)).to_be_enabled()
    shot(page, "stopped-light")

    page.get_by_role("button", name="Regenerate the answer").click()
    expect(last_answer(page)).to_have_attribute("data-status", "streaming")
    expect(page.locator("article.message")).to_have_count(2)
    page.get_by_role("button", name="Stop the answer").click()
    expect(last_answer(page)).to_have_attribute("data-status", "stopped")

    page.locator("article.message.user").hover()
    page.get_by_role("button", name="Edit and resend this message").click()
    editor = page.get_by_label("Edit your message")
    editor.fill("A short one")
    page.get_by_role("button", name="Save and send").click()
    expect(page.locator("article.message.user .bubble")).to_have_text("A short one")
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=20_000)
    expect(page.locator("article.message")).to_have_count(2)
    expect(page.locator(".chat-title")).to_have_text("A short one")


@pytest.mark.parametrize(("kind", "label"), [("ws", "WebSocket"), ("sse", "SSE"), ("rest", "REST")])
def test_every_transport_answers(
    live_server: LiveServer, open_page: OpenPage, kind: str, label: str
) -> None:
    base = live_server(*FAST)
    if kind != "ws":
        require_openai_routes(base)
    page = open_page(base)
    page.get_by_role("radio", name=label).check()
    if kind == "ws":
        wait_connected(page)
    send(page, f"Hello over {label}")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
    assert "The end." in answer.inner_text()
    stats = answer.locator(".stats").inner_text()
    assert stats.endswith(label) and re.search(r"\b\d+ tokens\b", stats), stats
    # each transport shows only what it measured: REST has no first token of its own
    assert ("first token" in stats) == (kind != "rest"), stats
    shot(page, f"transport-{kind}-light")


def test_history_survives_reload(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    send(page, "First question")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    send(page, "A follow-up")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    page.get_by_role("button", name="New conversation").click()
    send(page, "Another topic")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    # Writes to IndexedDB are asynchronous: wait until both conversations are stored, complete.
    page.wait_for_function(
        """async () => new Promise((resolve) => {
            const open = indexedDB.open('tokenpipe');
            open.onsuccess = () => {
                const store = open.result.transaction('conversations').objectStore('conversations');
                const all = store.getAll();
                all.onsuccess = () => resolve(all.result.length === 2 && all.result.every(
                    (c) => c.messages.every((m) => m.role === 'user' || m.status === 'done')));
            };
        })"""
    )
    page.reload()
    sidebar = page.get_by_role("navigation", name="Conversations")
    expect(sidebar.locator(".conversation-select")).to_have_text(
        ["Another topic", "First question"]
    )
    expect(page.locator(".chat-title")).to_have_text("Another topic")
    sidebar.get_by_role("button", name="First question", exact=True).click()
    expect(page.locator("article.message")).to_have_count(4)
    expect(page.locator("article.message.user .bubble")).to_have_text(
        ["First question", "A follow-up"]
    )
    expect(last_answer(page)).to_contain_text("The end.")
    shot(page, "history-light")

    sidebar.get_by_role("button", name="Delete conversation “Another topic”").click()
    expect(sidebar.locator(".conversation-select")).to_have_text(["First question"])
    page.wait_for_timeout(300)
    page.reload()
    expect(
        page.get_by_role("navigation", name="Conversations").locator(".conversation-select")
    ).to_have_text(["First question"])


def test_enter_while_ime_composes_does_not_send(
    live_server: LiveServer, open_page: OpenPage
) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    box = composer(page)
    box.click()
    page.keyboard.insert_text("にほんご")
    # Enter that confirms an IME candidate: isComposing set (Chrome, Firefox) ...
    box.evaluate(
        "el => el.dispatchEvent(new KeyboardEvent('keydown', "
        "{key: 'Enter', code: 'Enter', isComposing: true, bubbles: true, cancelable: true}))"
    )
    # ... or keyCode 229 (Safari sends compositionend first, then this keydown).
    box.evaluate(
        """el => {
            const event = new KeyboardEvent(
                'keydown', {key: 'Enter', code: 'Enter', bubbles: true, cancelable: true});
            Object.defineProperty(event, 'keyCode', {get: () => 229});
            el.dispatchEvent(event);
        }"""
    )
    page.wait_for_timeout(300)
    expect(page.locator("article.message")).to_have_count(0)
    expect(box).to_have_value("にほんご")

    box.press("Shift+Enter")
    page.keyboard.insert_text("二行目")
    expect(box).to_have_value("にほんご\n二行目")
    expect(page.locator("article.message")).to_have_count(0)

    box.press("Enter")  # a plain Enter does send: the checks above could have failed
    expect(page.locator("article.message.user .bubble")).to_have_text("にほんご\n二行目")
    expect(box).to_have_value("")


def test_phone_layout(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST), width=390, height=844)
    wait_connected(page)

    def assert_fits() -> None:
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
        input_box = composer(page).bounding_box()
        assert input_box is not None and input_box["y"] + input_box["height"] <= 844
        assert input_box["x"] >= 0 and input_box["x"] + input_box["width"] <= 390

    sidebar = page.get_by_role("navigation", name="Conversations")
    expect(sidebar).not_to_be_visible()
    assert_fits()
    # a touch keyboard's Enter makes a new line; the button sends
    composer(page).fill("Hello from a phone")
    composer(page).press("Enter")
    page.keyboard.insert_text("with a long line " * 6)
    expect(page.locator("article.message")).to_have_count(0)
    expect(composer(page)).to_have_value("Hello from a phone\n" + "with a long line " * 6)
    page.get_by_role("button", name="Send message").click()
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    assert_fits()
    expect(page.get_by_role("button", name="Send message")).to_be_visible()
    shot_both_schemes(page, "phone")

    menu = page.get_by_role("button", name="Conversations")
    menu.click()
    expect(sidebar).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.wait_for_timeout(300)  # the drawer slides in
    shot(page, "phone-sidebar-light")
    page.keyboard.press("Escape")
    expect(sidebar).not_to_be_visible()


def test_keyboard_only_and_settings(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    expect(composer(page)).to_be_focused()
    page.get_by_role("button", name="Settings").focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("System prompt")).to_be_visible()
    dialog.get_by_label("Max tokens").fill("12")
    dialog.get_by_label("Seed").fill("7")
    dialog.get_by_label("Temperature").fill("0")
    shot_both_schemes(page, "settings")
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()

    composer(page).focus()
    page.keyboard.type("Keyboard only")
    page.keyboard.press("Enter")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done")
    # Screen readers hear the answer's state changes, not every token.
    expect(page.locator(".message-scroller [aria-live=polite]")).to_have_text("Answer complete")
    # max_tokens from the settings went to the server: the answer was cut at 12 tokens.
    expect(answer.locator(".badge-stopped")).to_have_text("Cut at the max tokens limit")
    assert " · 12 tokens · " in answer.locator(".stats").inner_text()
    page.reload()
    page.get_by_role("button", name="Settings").click()
    expect(page.get_by_role("dialog", name="Settings").get_by_label("Max tokens")).to_have_value(
        "12"
    )


def test_connection_loss_reconnects_and_resumes(
    live_server: LiveServer, open_page: OpenPage, browser: Browser
) -> None:
    base = live_server("--engine", "fake", "--fake-pace-ms", "5")
    routes: list[WebSocketRoute] = []
    line = {"down": False}

    def proxy(route: WebSocketRoute) -> None:
        routes.append(route)
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
        send(page, "Keep talking [[tokens=250]]")
        wait_for_answer_text(page, 30)
        line["down"] = True
        routes[-1].close(code=1012, reason="test drops the line")
        banner = page.get_by_role("status").filter(has_text="Connection lost")
        expect(banner).to_be_visible()
        expect(last_answer(page).locator(".resume-note")).to_be_visible()
        expect(page.locator(".connection[data-status=reconnecting]")).to_be_visible()
        page.wait_for_timeout(1200)  # let a reconnect attempt fail: the backoff goes on
        assert len(routes) >= 2, "the page did not try to reconnect"
        shot(page, "reconnecting-light")

        line["down"] = False
        # dispatch_event: the banner re-renders on every backoff tick and attempt, which can
        # re-create the button between Playwright's stability check and its click
        banner.get_by_role("button", name="Retry now").dispatch_event("click")
        wait_connected(page)
        answer = last_answer(page)
        expect(answer).to_have_attribute("data-status", "done", timeout=20_000)
        resumed = answer_text(page)

        # The same request again, undisturbed: the resumed answer lost and repeated nothing.
        regenerate(page)
        assert answer_text(page) == resumed
    finally:
        context.close()


def test_api_key_goes_in_a_bearer_subprotocol(live_server: LiveServer, open_page: OpenPage) -> None:
    key = "s3cret key/ü"
    page = open_page(live_server(*FAST, "--api-key", key))
    expect(page.locator(".connection[data-status=reconnecting]")).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="Connection lost")).to_contain_text("API key")
    page.get_by_role("button", name="Settings").click()
    page.get_by_label("API key").fill(key)
    page.keyboard.press("Escape")
    wait_connected(page)
    send(page, "With a key")
    expect(last_answer(page)).to_have_attribute("data-status", "done")


def test_queue_position_shows_while_waiting(live_server: LiveServer, open_page: OpenPage) -> None:
    base = live_server(*FAST, "--parallel", "2")
    page = open_page(base)
    wait_connected(page)
    # Take every slot of the fake engine from another client, so the page's request waits.
    # max_queue=None: this client reads everything in the background, so its close is quick.
    with connect(
        base.replace("http", "ws") + "/ws",
        subprotocols=[Subprotocol("tokenpipe.v1")],
        max_queue=None,
    ) as other:
        hello = json.loads(other.recv(timeout=5))
        hog = {"role": "user", "content": "slow [[tokens=5000]] [[pace_ms=500]]"}
        for i in range(2):
            other.send(json.dumps({"type": "generate", "id": f"hog{i}", "messages": [hog]}))
        send(page, "Me next")
        status = last_answer(page).get_by_role("status")
        expect(status).to_have_text(re.compile(r"In the queue: position \d+"))
        shot(page, "queued-light")
    # The other client left, its generations were cancelled: the page's answer runs.
    expect(last_answer(page)).to_have_attribute("data-status", "done", timeout=20_000)
    assert hello["type"] == "hello"


def test_server_errors_are_shown_in_words(live_server: LiveServer, open_page: OpenPage) -> None:
    page = open_page(live_server(*FAST))
    wait_connected(page)
    send(page, "Break please [[fail_after=5]]")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "error")
    expect(answer.get_by_role("alert")).to_contain_text("The model failed while answering.")
    shot_both_schemes(page, "error")
    # The failed answer can be asked for again.
    expect(page.get_by_role("button", name="Regenerate the answer")).to_be_enabled()


def test_model_picker_routes_the_request(live_server: LiveServer, open_page: OpenPage) -> None:
    base = live_server(*FAST, "--model", "alpha=fake:a", "--model", "beta=fake:b")
    page = open_page(base)
    wait_connected(page)
    # several models: the picker is in the header
    page.get_by_label("Model for the next answers").select_option("beta")
    send(page, "Which model?")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done")
    expect(answer.locator(".stats")).to_contain_text(re.compile(r"^beta · "))
    require_openai_routes(base)
    page.get_by_role("radio", name="SSE").check()
    send(page, "And over SSE?")
    expect(last_answer(page)).to_have_attribute("data-status", "done")
    expect(last_answer(page).locator(".stats")).to_contain_text(re.compile(r"^beta · .*SSE$"))


@pytest.mark.model
def test_the_real_model_answers_in_the_page(model_server: ServerProcess,
                                            open_page: OpenPage) -> None:
    """The bundled SmolLM2 on llama.cpp, through the page: it streams, ends, and shows its
    figures; a Japanese question comes back without broken characters."""
    page = open_page(model_server.url)
    wait_connected(page)
    send(page, "日本の首都はどこですか？")
    answer = last_answer(page)
    expect(answer).to_have_attribute("data-status", "done", timeout=60_000)
    text = answer.locator(".markdown").inner_text()
    assert text.strip() and "\ufffd" not in text
    stats = answer.locator(".stats").inner_text()
    assert "SmolLM2-135M-Instruct" in stats and "tokens/s" in stats, stats
    shot(page, "real-model-light")
