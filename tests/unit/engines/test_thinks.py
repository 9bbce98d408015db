"""Asking a model that cannot think to think (engines/base.py refuse_thinking): a model can
think when its chat template writes a thinking section (constrain/thinking.py
template_thinks); a request that asks one that cannot is refused naming `think`, in
Ollama's words, before anything runs; one that does not ask is served as before."""

from __future__ import annotations

import dataclasses

import pytest

from tests.e2e.test_reasoning import QWEN3_LIKE_TEMPLATE, THINKING_TEMPLATE
from tokenpipe.constrain.thinking import template_thinks
from tokenpipe.engines.base import EngineInfo, refuse_thinking
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.errors import BadRequest
from tokenpipe.types import GenerationRequest, Message

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{% endfor %}")
ASK = GenerationRequest(messages=(Message("user", "hi"),))


def test_a_template_that_writes_a_thinking_section_thinks() -> None:
    assert template_thinks(THINKING_TEMPLATE) and template_thinks(QWEN3_LIKE_TEMPLATE)
    assert not template_thinks(CHATML)  # SmolLM2's kind
    assert not template_thinks(None) and not template_thinks("")


def test_asking_a_model_that_cannot_think_is_refused_naming_think() -> None:
    cannot = EngineInfo("llamacpp", "SmolLM2-135M-Instruct", 8192, 8)
    with pytest.raises(BadRequest) as refused:
        refuse_thinking(cannot, dataclasses.replace(ASK, think=True))
    assert refused.value.param == "think" and refused.value.status == 400
    assert refused.value.message.startswith('"SmolLM2-135M-Instruct" does not support '
                                            "thinking")
    refuse_thinking(cannot, dataclasses.replace(ASK, split_reasoning=True))  # not asked
    refuse_thinking(dataclasses.replace(cannot, thinks=True),
                    dataclasses.replace(ASK, think=True))
    refuse_thinking(dataclasses.replace(cannot, thinks=None),  # an upstream's: not known
                    dataclasses.replace(ASK, think=True))


def test_prepare_refuses_before_anything_runs() -> None:
    engine = FakeEngine()  # it writes the think tags a script holds: it can think
    assert engine.prepare(dataclasses.replace(ASK, think=True), 16).max_tokens == 16
    engine.info = dataclasses.replace(engine.info, thinks=False)
    with pytest.raises(BadRequest):
        engine.prepare(dataclasses.replace(ASK, think=True), 16)
