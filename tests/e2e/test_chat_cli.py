"""`tokenpipe chat` in a real pseudo-terminal: it streams, Ctrl-C stops the answer and not
the program, the conversation carries on, Ctrl-D leaves."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from typing import Any

import pytest

from tests.conftest import ServerProcess, running

pytestmark = pytest.mark.e2e


def _own_terminal() -> None:
    """Runs in the child: a new session whose controlling terminal is the pty, so Ctrl-C
    typed into it reaches the program as SIGINT, as in a real terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "tokenpipe", *args], stdin=slave,
                                     stdout=slave, stderr=slave, preexec_fn=_own_terminal)
        os.close(slave)
        self.screen = ""

    def read_until(self, needle: str, timeout: float = 30.0, start: int = 0) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.screen[start:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not seen; screen:\n{self.screen[-2000:]}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.screen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the program ended
                    raise AssertionError(f"program ended; screen:\n{self.screen}") from None
        return self.screen

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        os.close(self.master)


def test_chat_streams_and_ctrl_c_stops_only_the_answer(fake_server: ServerProcess) -> None:
    term = Terminal("chat", "--url", fake_server.ws_url)
    try:
        term.read_until("you> ")
        term.type("[[pace_ms=30]] tell me\r")
        mark = len(term.screen)
        term.read_until("Hello!", start=mark)  # the answer is streaming
        term.type("\x03")  # Ctrl-C, as a terminal sends it
        term.read_until("[stopped]", start=mark)
        term.read_until("you> ", start=mark)
        assert "The end." not in term.screen[mark:]  # it stopped before the end
        assert term.proc.poll() is None  # still running

        mark = len(term.screen)
        term.type("[[echo]] second turn works\r")
        term.read_until("second turn works", start=mark + len("[[echo]] second turn works"))
        term.read_until("you> ", start=mark)
        term.type("\x04")  # Ctrl-D leaves
        assert term.proc.wait(timeout=15) == 0
    finally:
        term.close()


def test_chat_shows_thinking_apart(fake_server: ServerProcess) -> None:
    term = Terminal("chat", "--url", fake_server.ws_url, "--reasoning")
    try:
        term.read_until("you> ")
        mark = len(term.screen)
        typed = "[[echo]]<think>weighing it</think>the answer"
        term.type(typed + "\r")
        after = mark + len(typed)  # the terminal's echo of the line
        term.read_until("bot> the answer", start=after)
        assert "think> weighing it\r\nbot> the answer" in term.screen[after:]
    finally:
        term.close()


@pytest.mark.model
def test_chat_tools_schema_and_logprobs_on_the_model(tmp_path: Any) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"colour": {
        "type": "string", "enum": ["red", "blue"]}}, "required": ["colour"],
        "additionalProperties": False}))
    with running(ServerProcess(("--parallel", "1", "--ctx-size", "2048"))) as server:
        term = Terminal("chat", "--url", server.ws_url, "--tools", str(tools),
                        "--tool-choice", "required", "--max-tokens", "60")
        try:
            term.read_until("you> ")
            mark = len(term.screen)
            term.type("What is the weather in Paris?\r")
            term.read_until("call> get_weather {", start=mark)
            term.read_until("you> ", start=mark)
        finally:
            term.close()
        term = Terminal("chat", "--url", server.ws_url, "--json-schema", str(schema),
                        "--logprobs", "2", "--max-tokens", "30")
        try:
            term.read_until("you> ")
            mark = len(term.screen)
            term.type("Pick a colour.\r")
            screen = term.read_until("logprobs: ", start=mark)
            answer = screen[mark:].split("bot> ", 1)[1].split("\r\n  (", 1)[0]
            assert json.loads(answer.replace("\r\n", "\n"))["colour"] in ("red", "blue")
            term.read_until("you> ", start=mark)
        finally:
            term.close()
    bad = subprocess.run([sys.executable, "-m", "tokenpipe", "chat", "--tools",
                          str(tmp_path / "missing.json")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "missing.json" in bad.stderr
