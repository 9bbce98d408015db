"""What watching costs the model: the server's tokens/s for one ~256-token answer rendered by
the chat page in headless Chromium (A) against the same request from a script client over
tokenpipe.v1 (B), alternated A B A B (three pairs by default), plus Chromium's own counters
per page answer: CPU in tasks (and per 100 tokens), layouts, style recalcs, and the long
tasks (over 50 ms, PerformanceObserver "longtask") while it streamed.

    python scripts/bench_ui.py                      # the bundled model on llama.cpp
    python scripts/bench_ui.py --engine fake        # the page's own cost, no model
    python scripts/bench_ui.py --url http://127.0.0.1:8000   # a server already running

Run it on a quiet machine; its figures are reported (docs/benchmarks.md), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright
from websockets.sync.client import connect
from websockets.typing import Subprotocol

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a long, detailed story about a lighthouse keeper and a storm."
CHROMIUM = os.environ.get("TOKENPIPE_CHROMIUM", "/usr/bin/chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tokenpipe", "serve", "--port", str(port),
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not become ready in 180 s")


def script_run(url: str, params: dict[str, object]) -> dict[str, float]:
    """B: one generate over tokenpipe.v1, read to its end; the server's own timing."""
    ws_url = url.replace("http", "ws", 1) + "/ws"
    with connect(ws_url, subprotocols=[Subprotocol("tokenpipe.v1")], max_size=None) as ws:
        json.loads(ws.recv(timeout=10))  # hello
        ws.send(json.dumps({"type": "generate", "id": "b", "params": params,
                            "messages": [{"role": "user", "content": PROMPT}]}))
        while True:
            frame = json.loads(ws.recv(timeout=120))
            if frame["type"] == "end":
                return {"tokens_per_s": frame["timing"]["tokens_per_s"],
                        "tokens": frame["usage"]["completion_tokens"]}
            if frame["type"] == "error":
                raise SystemExit(f"the script client got an error: {frame}")


# Long tasks (over 50 ms) from the send on: what would make the page stutter while it streams.
LONG_TASKS = """() => { window.__longTasks = []; new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__longTasks.push(entry.duration); })
    .observe({type: 'longtask'}); }"""


def page_run(page, cdp, url: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """A: the page sends the same request and renders it; the server's timing comes back in
    the answer's end frame, which the page keeps with the answer (IndexedDB)."""
    page.goto(url)
    page.wait_for_selector(".connection[data-status=open]")
    page.evaluate(LONG_TASKS)
    before = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    box = page.get_by_role("textbox", name="Your message", exact=True)
    box.fill(PROMPT)
    box.press("Enter")
    page.wait_for_selector("article.message.assistant[data-status=done]", timeout=120_000)
    after = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    # the conversation is written to IndexedDB just after the end: wait for that write
    stats = page.wait_for_function(
        """() => new Promise((resolve) => {
            const open = indexedDB.open('tokenpipe');
            open.onsuccess = () => {
                const store = open.result.transaction('conversations').objectStore('conversations');
                const all = store.getAll();
                all.onsuccess = () => resolve(all.result.flatMap((c) => c.messages)
                    .filter((m) => m.role === 'assistant' && m.stats).map((m) => m.stats).pop()
                    ?? null);
            };
        })""",
        timeout=10_000,
    ).json_value()
    counters = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration",
                "LayoutCount", "RecalcStyleCount")
    long_tasks: list[float] = page.evaluate("window.__longTasks")
    figures = {k: after[k] - before.get(k, 0) for k in counters}
    return {"tokens_per_s": stats["tokensPerS"], "tokens": stats["completionTokens"],
            "cpu_ms_per_100": 1000 * figures["TaskDuration"] * 100 / stats["completionTokens"],
            "long_tasks": len(long_tasks), "longest_ms": max(long_tasks, default=0.0),
            **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--engine", default=None, help="start the server with this engine")
    parser.add_argument("--pairs", type=int, default=3, help="A B alternations")
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    proc = None
    url = args.url
    if url is None:
        serve_args = ["--parallel", "1"]
        if args.engine == "fake":
            serve_args = ["--engine", "fake", "--fake-pace-ms", "10"]
        elif args.engine:
            serve_args += ["--engine", args.engine]
        proc, url = start_server(serve_args)
    params: dict[str, object] = {"max_tokens": args.max_tokens, "temperature": 0}
    settings = {"transport": "ws", "maxTokens": args.max_tokens, "temperature": 0}
    results: dict[str, list[dict[str, float]]] = {"page": [], "script": []}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--no-first-run"])
            for pair in range(args.pairs):
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                stored = json.dumps(json.dumps(settings))
                context.add_init_script(f"localStorage.setItem('tokenpipe.settings', {stored})")
                page = context.new_page()
                cdp = context.new_cdp_session(page)
                cdp.send("Performance.enable")
                a = page_run(page, cdp, url)
                context.close()
                b = script_run(url, params)
                results["page"].append(a)
                results["script"].append(b)
                print(f"pair {pair + 1}: page {a['tokens_per_s']:.1f} tok/s ({a['tokens']:.0f} "
                      f"tokens, Chromium {a['TaskDuration']:.2f} s CPU = "
                      f"{a['cpu_ms_per_100']:.0f} ms per 100 tokens, {a['long_tasks']:.0f} long "
                      f"tasks (longest {a['longest_ms']:.0f} ms), {a['LayoutCount']:.0f} layouts, "
                      f"{a['RecalcStyleCount']:.0f} style recalcs) | script "
                      f"{b['tokens_per_s']:.1f} tok/s ({b['tokens']:.0f} tokens)", flush=True)
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    page_rate = statistics.median(r["tokens_per_s"] for r in results["page"])
    script_rate = statistics.median(r["tokens_per_s"] for r in results["script"])
    cpu = statistics.median(r["cpu_ms_per_100"] for r in results["page"])
    long_tasks = statistics.median(r["long_tasks"] for r in results["page"])
    print(f"median: page {page_rate:.1f} tok/s, script {script_rate:.1f} tok/s, "
          f"ratio {page_rate / script_rate:.2f}; Chromium {cpu:.0f} ms CPU per 100 tokens, "
          f"{long_tasks:.0f} long tasks an answer; load average {os.getloadavg()[0]:.1f} "
          "(other work on this machine slows both sides)")


if __name__ == "__main__":
    main()
