"""How long a reload costs a running answer on the chat page: from the reload's start
(the new document's time origin) to the first token the page shows after it, per transport
(tokenpipe.v1 `resume`, `GET /v1/streams/TOKEN`, a background response's stream), the page
in headless Chromium, the answer reloaded mid-stream a few times each.

    python scripts/bench_ui_resume.py                  # the fake engine, 50 tokens/s
    python scripts/bench_ui_resume.py --engine llamacpp --runs 5
    python scripts/bench_ui_resume.py --url http://127.0.0.1:8000

The time is what a user waits: loading the page, reading IndexedDB, connecting, the resume
request and its first delta. Run it on a quiet machine; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ui import CHROMIUM, start_server  # a script beside this one

TRANSPORTS = {"ws": "WebSocket", "sse": "SSE", "responses": "Responses"}
# In every document: when the last answer's text first grows past what the page restored.
WATCH = """(() => { window.__resumedAt = null; let restored = null;
  new MutationObserver(() => {
    const all = document.querySelectorAll('article.message.assistant .markdown');
    const text = all.length ? all[all.length - 1].textContent.length : null;
    if (text === null || window.__resumedAt !== null) return;
    if (restored === null) restored = text;
    else if (text > restored) window.__resumedAt = performance.now();
  }).observe(document, {subtree: true, childList: true, characterData: true}); })()"""


def one_reload(page: Page, url: str, prompt: str, after_ms: int, kind: str) -> float:
    """Send, let it stream for `after_ms`, reload; ms from the reload to the first new token."""
    page.goto(url)
    if kind == "ws":
        page.wait_for_selector(".connection[data-status=open]")
    box = page.get_by_role("textbox", name="Your message", exact=True)
    box.fill(prompt)
    box.press("Enter")
    page.wait_for_function("() => (document.querySelector('article.message.assistant"
                           " .markdown')?.textContent ?? '').length > 20", timeout=120_000)
    page.wait_for_timeout(after_ms)
    page.reload(wait_until="commit")
    page.wait_for_function("window.__resumedAt !== null", timeout=60_000)
    resumed: float = page.evaluate("window.__resumedAt")
    page.get_by_role("button", name="Stop the answer").click()
    return resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--engine", default="fake", help="the engine of the server started")
    parser.add_argument("--runs", type=int, default=3, help="reloads per transport")
    parser.add_argument("--after-ms", type=int, default=1000, help="streaming before a reload")
    args = parser.parse_args()

    proc = None
    url = args.url
    fake = args.engine == "fake"
    if url is None:
        serve = ["--engine", "fake", "--fake-pace-ms", "20"] if fake else ["--engine", args.engine]
        proc, url = start_server(serve)
    prompt = "[[tokens=3000]] Tell a long story." if fake else (
        "Write a long, detailed story about a lighthouse keeper and a storm.")
    results: dict[str, list[float]] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--no-first-run"])
            for kind, name in TRANSPORTS.items():
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                settings = json.dumps(json.dumps({"transport": kind, "maxTokens": 2000}))
                context.add_init_script(f"localStorage.setItem('tokenpipe.settings', {settings})")
                context.add_init_script(WATCH)
                page = context.new_page()
                results[name] = [one_reload(page, url, prompt, args.after_ms, kind)
                                 for _ in range(args.runs)]
                context.close()
                print(f"{name}: reload to the first resumed token "
                      + ", ".join(f"{ms:.0f}" for ms in results[name]) + " ms; median "
                      f"{statistics.median(results[name]):.0f} ms", flush=True)
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print(f"load average {os.getloadavg()[0]:.1f} (other work on this machine lengthens these)")


if __name__ == "__main__":
    main()
