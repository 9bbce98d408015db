"""Ollama's answers (protocol/ollama/responses.py): NDJSON lines, the last line's counts and
nanosecond durations, the load answer, and the model listings."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tokenpipe.protocol.ollama.responses import (
    Answer,
    Kind,
    call_json,
    details,
    durations,
    line,
    loaded_model,
    shown,
    tag,
    timestamp,
)
from tokenpipe.types import FinishReason, Timing, Usage

TIMING = Timing(queue_ms=1.5, ttft_ms=21.5, total_ms=121.5, tokens_per_s=50.0)
USAGE = Usage(prompt_tokens=30, completion_tokens=6, cached_tokens=10)


def test_delta_lines_are_one_json_object_each() -> None:
    chat, gen = Answer("smollm2:latest", chat=True), Answer("m", chat=False)
    text = 'line\none "quoted" 日本語 🎉'
    raw = chat.delta(text)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    obj = json.loads(raw)
    assert list(obj) == ["model", "created_at", "message", "done"]
    assert obj["model"] == "smollm2:latest" and obj["done"] is False
    assert obj["message"] == {"role": "assistant", "content": text}
    generated = json.loads(gen.delta(text))
    assert generated == {"model": "m", "created_at": generated["created_at"],
                         "response": text, "done": False}
    assert datetime.fromisoformat(obj["created_at"]).tzinfo is not None
    assert obj["created_at"].endswith("Z")


def test_the_last_line_has_ollamas_counts_in_nanoseconds() -> None:
    done = Answer("m", chat=True).done("", FinishReason.LENGTH, USAGE, TIMING)
    assert done["done"] is True and done["done_reason"] == "length"
    assert done["message"] == {"role": "assistant", "content": ""}
    assert done["prompt_eval_count"] == 30 and done["eval_count"] == 6
    assert done["total_duration"] == 121_500_000
    assert done["load_duration"] == 1_500_000  # the wait for a place
    assert done["prompt_eval_duration"] == 20_000_000  # taken -> first token
    assert done["eval_duration"] == 100_000_000  # first token -> end
    whole = Answer("m", chat=False).done("all of it", FinishReason.STOP, USAGE, TIMING)
    assert whole["response"] == "all of it" and "message" not in whole
    assert json.loads(line(whole)) == whole


def test_durations_without_a_token_never_go_negative() -> None:
    none = durations(Timing(queue_ms=5.0, ttft_ms=None, total_ms=4.0, tokens_per_s=None))
    assert none == {"total_duration": 4_000_000, "load_duration": 5_000_000,
                    "prompt_eval_duration": 0, "eval_duration": 0}


def test_the_load_answer_is_ollamas() -> None:
    loaded = Answer("m", chat=True).loaded()
    assert (loaded["done"], loaded["done_reason"]) == (True, "load")
    assert loaded["message"] == {"role": "assistant", "content": ""}
    assert Answer("m", chat=False).loaded()["response"] == ""


def test_listings_say_only_what_is_known() -> None:
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    gguf, plain = Kind(gguf=True, tools=True), Kind()
    assert details(gguf)["format"] == "gguf" and details(plain)["format"] == ""
    assert {details(gguf)[k] for k in ("family", "parameter_size",
                                       "quantization_level")} == {""}
    entry = tag("m:latest", gguf, since)
    assert entry["name"] == entry["model"] == "m:latest"
    assert entry["modified_at"] == timestamp(since) == "2026-01-02T03:04:05.000000Z"
    assert (entry["size"], entry["digest"]) == (0, "")
    ps = loaded_model("m:latest", plain, 4096, None)
    assert ps["context_length"] == 4096
    assert datetime.fromisoformat(ps["expires_at"]).year > 2300  # Ollama's "forever"
    soon = loaded_model("m:latest", plain, 4096, since.timestamp() + 300)
    assert soon["expires_at"] == "2026-01-02T03:09:05.000000Z"  # its keep-alive's end
    busy = loaded_model("m:latest", plain, 4096, since.timestamp(), busy=True)
    assert datetime.fromisoformat(busy["expires_at"]).year > 2300  # running: not counting
    info = shown("m:latest", plain, 4096, since)
    assert info["parameters"] == "num_ctx 4096" and "FROM m:latest" in info["modelfile"]
    assert info["capabilities"] == ["completion"] and info["template"] == ""
    assert shown("m", gguf, 4096, since)["capabilities"] == ["completion", "tools"]
    assert shown("m", gguf, 4096, since, embeds=True)["capabilities"] == [
        "completion", "tools", "embedding"]
    assert shown("m", gguf, 4096, since, embeds=True, thinks=True)["capabilities"] == [
        "completion", "tools", "thinking", "embedding"]
    assert info["model_info"] == {"tokenpipe.context_length": 4096}


def test_thinking_and_calls_in_ollamas_fields() -> None:
    chat, gen = Answer("m", chat=True), Answer("m", chat=False)
    assert json.loads(chat.part("t", thinking="hm")) == {
        "model": "m", "created_at": "t", "done": False,
        "message": {"role": "assistant", "content": "", "thinking": "hm"}}
    assert json.loads(gen.part("t", thinking="hm")) == {
        "model": "m", "created_at": "t", "done": False, "response": "", "thinking": "hm"}
    calls = [call_json("f", '{"x": [1, 2]}'), call_json("g", '{"x": "cut')]
    assert calls == [{"function": {"name": "f", "arguments": {"x": [1, 2]}}},
                     {"function": {"name": "g", "arguments": {}}}]  # a cut string: unread
    done = chat.done("", FinishReason.TOOL_CALLS, USAGE, TIMING, "why", calls)
    assert done["done_reason"] == "stop"  # Ollama's word for an answer that made calls
    assert done["message"] == {"role": "assistant", "content": "", "thinking": "why",
                               "tool_calls": calls}
