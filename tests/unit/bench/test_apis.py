"""The bench's stream parsers (bench/apis.py) on streams recorded from tokenpipe's own
doors: `recorded/<api>.txt` from the bundled model (6 tokens: three Japanese characters,
two tokens each), `recorded/<api>_failed.txt` from the fake engine with
`[[tokens=4]][[fail_after=2]]` (two pieces of text, then an engine fault)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpipe.bench.apis import APIS, listed_model
from tokenpipe.bench.cli import HTTP_APIS
from tokenpipe.bench.results import StreamResult

RECORDED = Path(__file__).parent / "recorded"


def parsed(api: str, name: str, split: int | None) -> StreamResult:
    result = StreamResult()
    result.start()
    parser = APIS[api].parser(result)
    raw = (RECORDED / name).read_bytes()
    step = split or len(raw)
    for i in range(0, len(raw), step):  # pieces that split lines, events and characters
        parser.feed(raw[i:i + step])
    return result


@pytest.mark.parametrize("split", [None, 1, 7])
@pytest.mark.parametrize("api", HTTP_APIS)
def test_each_parser_counts_the_texts_and_the_servers_usage(api: str, split: int | None
                                                            ) -> None:
    result = parsed(api, f"{api}.txt", split)
    # 3 pieces of text (お, わ, ら): the empty opening delta and the done line are none
    assert (result.error, result.deltas, result.tokens) == (None, 3, 6)
    assert result.ttft > 0 and len(result.gaps) == 2


@pytest.mark.parametrize("split", [None, 5])
@pytest.mark.parametrize("api", HTTP_APIS)
def test_each_parser_reports_a_failure_mid_stream(api: str, split: int | None) -> None:
    result = parsed(api, f"{api}_failed.txt", split)
    assert result.deltas == 2
    assert result.error is not None and "fake engine fault after 2 tokens" in result.error


def test_the_table_has_every_http_api_the_flag_offers() -> None:
    assert set(APIS) == set(HTTP_APIS)


def test_ollama_model_is_read_from_the_tags_list() -> None:
    tags = b'{"models":[{"name":"SmolLM2-135M-Instruct:latest","model":"x"},{"name":"b"}]}'
    assert listed_model(tags) == "SmolLM2-135M-Instruct:latest"
    assert listed_model(b'{"models":[]}') is None
    assert listed_model(b"not json") is None
    assert listed_model(b"[1]") is None
