"""Settings from flags and TOKENPIPE_* variables, and the engine registry."""

from __future__ import annotations

import pytest

from tokenpipe.config import (
    Settings,
    build_engines,
    engine_class,
    parse_model_spec,
)
from tokenpipe.engines.fake import FakeEngine


def test_environment_variables_are_parsed_by_the_field_type() -> None:
    s = Settings.from_env({"TOKENPIPE_PORT": "9001", "TOKENPIPE_FAKE_PACE_MS": "2.5",
                           "TOKENPIPE_ALLOWED_ORIGINS": "https://a.example, ,https://b.example",
                           "TOKENPIPE_ENGINE": "fake", "TOKENPIPE_DETERMINISM": "serial"})
    assert (s.port, s.fake_pace_ms, s.engine) == (9001, 2.5, "fake")
    assert s.allowed_origins == ("https://a.example", "https://b.example")
    assert s.engine_options().determinism == "serial"
    assert s.engine_options().pace_ms == 2.5


def test_flags_win_over_the_environment_and_unset_flags_do_not() -> None:
    s = Settings.from_env({"TOKENPIPE_PORT": "9001", "TOKENPIPE_PARALLEL": "3"},
                          port=9002, parallel=None)
    assert (s.port, s.parallel) == (9002, 3)


def test_an_empty_variable_keeps_the_default() -> None:
    assert Settings.from_env({"TOKENPIPE_PORT": ""}).port == Settings().port


def test_a_bad_number_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"TOKENPIPE_PORT='eighty' is not a valid int"):
        Settings.from_env({"TOKENPIPE_PORT": "eighty"})


def test_keys_stay_out_of_the_settings_repr() -> None:
    s = Settings(api_key="sekrit", upstream_key="upsekrit")
    assert "sekrit" not in repr(s)


def test_the_registry_names_its_engines_and_refuses_others() -> None:
    assert engine_class("fake") is FakeEngine
    with pytest.raises(ValueError, match="unknown engine 'vllm'; choose one of llamacpp"):
        engine_class("vllm")


@pytest.mark.parametrize(("spec", "expected"), [
    ("small=llamacpp:/models/a.gguf", ("small", "llamacpp", "/models/a.gguf")),
    ("big=openai:http://gpu:8000", ("big", "openai", "http://gpu:8000")),
    ("plain=/models/b.gguf", ("plain", "fake", "/models/b.gguf")),
    ("win=C:/models/c.gguf", ("win", "fake", "C:/models/c.gguf")),  # not an engine name
])
def test_model_specs(spec: str, expected: tuple[str, str, str]) -> None:
    assert parse_model_spec(spec, "fake") == expected


@pytest.mark.parametrize("spec", ["noequals", "=x", "name="])
def test_a_bad_model_spec_says_what_is_expected(spec: str) -> None:
    with pytest.raises(ValueError, match="expected NAME=\\[ENGINE:\\]SPEC"):
        parse_model_spec(spec, "fake")


def test_several_models_get_their_names_and_must_be_unique() -> None:
    engines = build_engines(Settings(engine="fake", models=("a=fake:", "b=fake:")))
    assert [e.info.model_id for e in engines] == ["a", "b"]
    with pytest.raises(ValueError, match="model names must be unique"):
        build_engines(Settings(engine="fake", models=("a=fake:", "a=fake:")))
