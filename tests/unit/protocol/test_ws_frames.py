"""Client frames that must be refused at parse time (issue 15, item 4), the frame budget,
the frame encoder's fallback and the log redaction, without a server."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from tokenpipe.errors import BadRequest
from tokenpipe.logs import JsonFormatter, RedactSecrets
from tokenpipe.protocol import ws as wire
from tokenpipe.server.ws.budget import FrameBudget, Verdict
from tokenpipe.server.ws.frame_sink import clean, utf8
from tokenpipe.types import Delta, TokenLogprob

LONE = "\\ud800"  # as a client sends it: the JSON escape of a lone surrogate


def gen(content: str, **extra: object) -> str:
    frame = {"type": "generate", "id": "g1",
             "messages": [{"role": "user", "content": "CONTENT"}], **extra}
    return json.dumps(frame).replace('"CONTENT"', content)


@pytest.mark.parametrize(("text", "field"), [
    (gen(f'"a{LONE}b"'), "messages.0.content"),
    (f'{{"type":"ping","data":"{LONE}"}}', "data"),
    (f'{{"type":"ping","data":{{"k":["x","{LONE}"]}}}}', "data.k.1"),
    (f'{{"type":"generate","id":"{LONE}","prompt":"hi"}}', "id"),
    ('{"type":"cancel","id":"\\udfff"}', "id"),
    (f'{{"type":"resume","stream":"t{LONE}","after_seq":0}}', "stream"),
    (f'{{"type":"{LONE}"}}', "type"),
    (f'{{"type":"ping","data":{{"{LONE}":1}}}}', "data"),  # in a key
    ('{"type":"ping","data":' + "9" * 5000 + "}", "data"),
    ('{"type":"ping","data":-' + "9" * 5000 + "}", "data"),
    ('{"type":"generate","id":"g","prompt":"x","params":{"seed":' + "1" * 4400 + "}}",
     "params.seed"),
    ('{"type":"ping","data":NaN}', "data"),
    ('{"type":"ping","data":[1,Infinity]}', "data.1"),
    ('{"type":"ping","data":-Infinity}', "data"),
    ('{"type":"ping","data":1e999}', "data"),
    ('{"type":"generate","id":"g","prompt":"x","params":{"temperature":NaN}}',
     "params.temperature"),
])
def test_values_no_encoder_or_rfc_8259_allows_are_refused_naming_the_field(
    text: str, field: str
) -> None:
    with pytest.raises(BadRequest) as info:
        wire.parse_client_frame(text)
    assert info.value.param == field
    assert f"'{field}'" in info.value.message
    info.value.message.encode()  # the error itself can always be sent


def test_deep_nesting_is_a_bad_request() -> None:
    for text in ("[" * 100_000, '{"type":"ping","data":' + "[" * 100_000 + "]" * 100_000 + "}"):
        with pytest.raises(BadRequest) as info:
            wire.parse_client_frame(text)
        assert "nested too deeply" in info.value.message


@pytest.mark.parametrize("text", ["not json", "{", '{"type":"ping"} x', '"\\x"'])
def test_malformed_json_is_a_bad_request(text: str) -> None:
    with pytest.raises(BadRequest, match="not valid JSON"):
        wire.parse_client_frame(text)


def test_what_is_valid_still_parses() -> None:
    pair = "\\ud83d\\ude00"  # a surrogate pair: one emoji, valid
    frame = wire.parse_client_frame(gen(f'"smile {pair}"'))
    assert isinstance(frame, wire.Generate)
    assert frame.messages is not None and frame.messages[0].content == "smile \U0001f600"
    ping = wire.parse_client_frame('{"type":"ping","data":[1.5,-2,"\\\\ud800",' +
                                   "9" * 4000 + ',{"a":null}]}')
    assert isinstance(ping, wire.Ping)
    assert ping.data[2] == "\\ud800"  # an escaped backslash, not a surrogate
    assert ping.data[3] == int("9" * 4000)
    assert json.loads(wire.dumps({"type": "pong", "data": ping.data}))["data"] == ping.data


def test_frame_id_only_names_ids_the_protocol_allows() -> None:
    assert wire.frame_id('{"type":"generate","id":"ok-1"}') == "ok-1"
    assert wire.frame_id(f'{{"type":"generate","id":"{LONE}"}}') is None
    assert wire.frame_id('{"type":"generate","id":"has space"}') is None
    assert wire.frame_id('{"id":' + "9" * 5000 + "}") is None
    assert wire.frame_id("[" * 100_000) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_passes_a_burst_then_notifies_once_per_interval() -> None:
    clock = Clock()
    budget = FrameBudget(10, evict_after_s=3, clock=clock)
    assert [budget.take() for _ in range(20)] == [Verdict.PASS] * 20  # burst: twice the rate
    assert budget.take() is Verdict.NOTIFY
    assert "1 frame dropped" in budget.notice()
    assert {budget.take() for _ in range(1000)} == {Verdict.DROP}  # no frame per refusal
    clock.now += 1.0
    assert budget.take() is Verdict.PASS  # 10 tokens came back
    for _ in range(9):
        budget.take()
    assert budget.take() is Verdict.NOTIFY
    assert "1001 frames dropped since the last notice" in budget.notice()
    assert budget.retry_after_ms() > 0


def test_budget_counts_drops_in_the_next_notice() -> None:
    clock = Clock()
    budget = FrameBudget(1, evict_after_s=0, clock=clock)
    budget.take(), budget.take()
    assert budget.take() is Verdict.NOTIFY
    budget.notice()
    for _ in range(5):
        assert budget.take() is Verdict.DROP
    clock.now += 1.0
    budget.take()  # a token came back: passes
    assert budget.take() is Verdict.NOTIFY
    assert "6 frames dropped" in budget.notice()  # the 5 silent ones and this one


def test_budget_evicts_a_sustained_flood_only() -> None:
    clock = Clock()
    budget = FrameBudget(10, evict_after_s=3, clock=clock)
    verdicts = []
    for _ in range(50):  # 40 frames a second for 5 s: over the budget every second
        for _ in range(4):
            verdicts.append(budget.take())
        clock.now += 0.1
    assert Verdict.EVICT in verdicts
    first = verdicts.index(Verdict.EVICT)
    assert 3 * 40 <= first <= 5 * 40  # after 3 s over the budget, not at the first refusal

    calm = FrameBudget(10, evict_after_s=3, clock=clock)
    for _ in range(10):  # a burst over the budget, then a quiet second, again and again
        assert Verdict.EVICT not in [calm.take() for _ in range(25)]
        clock.now += 2.0


def test_unlimited_budget_passes_everything() -> None:
    budget = FrameBudget(0, evict_after_s=3)
    assert {budget.take() for _ in range(10_000)} == {Verdict.PASS}


def test_a_frame_with_a_lone_surrogate_is_still_encodable() -> None:
    assert utf8("ok é") == "ok é".encode()
    assert utf8("a\ud800b") == "a\ufffdb".encode()
    assert clean("x\udfff") == "x\ufffd"


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("Authorization: Bearer s3cret in a traceback")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("uvicorn.error", logging.DEBUG, __file__, 1, msg, args, exc_info)


@pytest.mark.parametrize(("msg", "args"), [
    ("< %s: %s", ("Authorization", "Bearer s3cret")),
    ("< %s: %s", ("authorization", "bearer s3cret")),
    ("< %s: %s", ("X-API-Key", "s3cret")),
    ("< %s: %s", ("Cookie", "session=s3cret")),
    ("< %s: %s", ("Sec-WebSocket-Protocol", "tokenpipe.v1, tokenpipe.bearer.czNjcmV0")),
    ("headers %r", ([(b"authorization", b"Bearer s3cret")],)),
    ("headers %r", ({"x-api-key": "s3cret"},)),
    ("GET /v1/models?key=%s", ("s3cret",)),
])
def test_redaction_removes_credentials_in_text_and_json(msg: str, args: tuple[object, ...]
                                                        ) -> None:
    for formatter in (logging.Formatter("%(message)s"), JsonFormatter()):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        handler.addFilter(RedactSecrets(["s3cret"]))
        handler.handle(_record(msg, *args))
        handler.handle(_record("failed", exc=True))
        out = stream.getvalue()
        assert "s3cret" not in out and "czNjcmV0" not in out, out
        assert "[redacted]" in out


def test_redaction_keeps_ordinary_lines() -> None:
    f = RedactSecrets(["s3cret"])
    line = 'ready: engine=fake model=fake-1 "WebSocket /ws" [accepted] keyboard=ok'
    assert f.redact(line) == line


def test_budget_holds_reads_until_just_past_the_interval() -> None:
    clock = Clock()
    clock.now = 1000.25
    budget = FrameBudget(10, evict_after_s=3, clock=clock)
    assert 0.75 < budget.hold_s() < 0.8  # the next read falls in the next interval
    assert not budget.refused_since(0)
    for _ in range(21):
        budget.take()
    assert budget.refused_since(1000.0) and not budget.refused_since(1000.3)


def test_logprobs_params_and_the_delta_that_carries_them() -> None:
    frame = wire.parse_client_frame(json.dumps({
        "type": "generate", "id": "a", "prompt": "x",
        "params": {"logprobs": True, "top_logprobs": 2}}))
    assert isinstance(frame, wire.Generate)
    assert frame.to_request().params.logprobs == 2
    plain = wire.parse_client_frame('{"type": "generate", "id": "a", "prompt": "x"}')
    assert isinstance(plain, wire.Generate) and plain.to_request().params.logprobs is None
    alone = wire.parse_client_frame(json.dumps({
        "type": "generate", "id": "a", "prompt": "x", "params": {"top_logprobs": 2}}))
    assert isinstance(alone, wire.Generate)
    with pytest.raises(BadRequest) as refused:
        alone.to_request()
    assert refused.value.param == "top_logprobs"
    entry = TokenLogprob("é", -0.5, "é".encode(), (("é", -0.5, "é".encode()),))
    text = wire.EventText("a")
    scored = json.loads(text(Delta(0, "é", logprobs=(entry,))))
    assert scored["logprobs"] == [{"token": "é", "logprob": -0.5, "bytes": [195, 169],
                                   "top_logprobs": [{"token": "é", "logprob": -0.5,
                                                     "bytes": [195, 169]}]}]
    assert "logprobs" not in json.loads(text(Delta(1, "é")))  # the template, as before
