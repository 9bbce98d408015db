"""--chat-template on both local engines: the override renders the prompt, not the model's
own template (the GGUF's for llama.cpp, the tokenizer's for transformers)."""

from __future__ import annotations

import pytest

from tests.conftest import THREADS, chat
from tokenpipe.config import engine_class
from tokenpipe.engines.base import EngineOptions

TEMPLATE = ("MARKER {% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} "
            "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}")


@pytest.mark.model
@pytest.mark.parametrize("name", ["llamacpp", "transformers"])
async def test_the_template_given_renders_the_prompt(name: str,
                                                     request: pytest.FixtureRequest) -> None:
    pytest.importorskip({"llamacpp": "llama_cpp", "transformers": "transformers"}[name])
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    request = chat("Hello there")
    engine = engine_class(name).from_options(EngineOptions(
        parallel=1, context_size=512, threads=THREADS, chat_template=TEMPLATE))
    try:
        await engine.load()
        # SmolLM2's own template is ChatML (<|im_start|>...): this text is only the override's
        assert engine.render(request) == "MARKER [user] Hello there [assistant]"
        prepared = engine.prepare(request, 8)
        assert prepared.prompt_text == "MARKER [user] Hello there [assistant]"
        assert list(prepared.prompt_ids) == list(engine.tokenize(prepared.prompt_text))
    finally:
        await engine.aclose()
