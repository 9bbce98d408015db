"""Simon Willison's `llm` (docs/clients.md) against the bundled model, as its users set it
up: a model in `extra-openai-models.yaml` with `api_base` and `supports_schema: true`
(without it `llm` refuses `--schema` itself). A prompt streams, and a schema answer is JSON
valid against the schema `llm` sent."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.model]


def test_llm_streams_and_answers_under_a_schema(model_server: ServerProcess, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import llm  # the test extra: a missing one fails, never skips

    (tmp_path / "extra-openai-models.yaml").write_text(
        "- model_id: tokenpipe\n"
        "  model_name: SmolLM2-135M-Instruct\n"
        f"  api_base: \"{model_server.url}/v1\"\n"
        "  supports_schema: true\n")
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path))  # llm's user directory
    model = llm.get_model("tokenpipe")
    response = model.prompt("Write a haiku about rain.", temperature=0, max_tokens=24)
    chunks = list(response)  # streamed (the default)
    assert len(chunks) > 1 and "".join(chunks) == response.text()
    schema = llm.schema_dsl("name, age int")
    answer = model.prompt("Describe a dog.", schema=schema, temperature=0, max_tokens=60)
    jsonschema.validate(json.loads(answer.text()), schema)
