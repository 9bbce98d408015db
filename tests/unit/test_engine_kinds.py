"""Engines declare their options and capabilities (engines/kind.py): a new engine registered
with one line of config.ENGINES gets its flags, TOKENPIPE_* variables, configuration file
keys and model table keys, and its engine reads them, with no other module touched."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tokenpipe import cli
from tokenpipe.config import ENGINES, Settings, engine_class, engine_kind, engine_makers
from tokenpipe.config_file import ConfigError
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.engines.kind import EngineKind, Option

KIND = EngineKind(
    "echo", f"{__name__}:EchoEngine",
    options=(
        Option("echo_voice", "str", "plain", choices=("plain", "loud", "soft"),
               help="echo engine: how it speaks"),
        Option("echo_rate", "float", 1.0, model_key="rate", attr="rate",
               help="echo engine: words a second"),
    ),
)


class EchoEngine(FakeEngine):
    """A scripted engine that keeps the options its kind declares."""

    kind = KIND

    @classmethod
    def from_options(cls, options: EngineOptions) -> EchoEngine:
        engine = cls(options.model_id or "echo")
        engine.own = KIND.read(options.values)
        return engine


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENGINES, "echo", f"{__name__}:KIND")  # the one registry line


def _serve(argv: list[str]) -> Settings:
    parser = argparse.ArgumentParser()
    cli._serve_parser(parser.add_subparsers(dest="command"))
    return cli.settings_from_args(parser.parse_args(["serve", *argv]))


def test_a_registered_engine_gets_its_flags(registered: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _serve(["--help"])
    shown = capsys.readouterr().out
    assert "--echo-voice {plain,loud,soft}" in shown and "echo engine: words a second" in shown
    assert "{echo,fake,llamacpp,openai,transformers}" in shown  # --engine's choices
    settings = _serve(["--engine", "echo", "--echo-voice", "loud", "--echo-rate", "2.5"])
    assert (settings.echo_voice, settings.echo_rate) == ("loud", 2.5)
    (make,) = engine_makers(settings)
    engine = make()
    assert isinstance(engine, EchoEngine) and engine.own == {"echo_voice": "loud", "rate": 2.5}
    with pytest.raises(SystemExit):
        _serve(["--engine", "echo", "--echo-voice", "whisper"])  # not one of its choices


def test_a_registered_engine_gets_its_variables_and_file_keys(
        registered: None, tmp_path: Path) -> None:
    assert Settings.from_env({"TOKENPIPE_ECHO_RATE": "3"}).echo_rate == 3.0
    with pytest.raises(ValueError, match="TOKENPIPE_ECHO_RATE='fast' is not a valid float"):
        Settings.from_env({"TOKENPIPE_ECHO_RATE": "fast"})
    config = tmp_path / "tokenpipe.toml"
    config.write_text('engine = "echo"\necho_voice = "soft"\n\n'
                      '[models.a]\nrate = 4.5\n\n[models.b]\n')
    settings = Settings.load(str(config), environ={})
    assert (settings.echo_voice, settings.echo_rate) == ("soft", 1.0)
    a, b = (make() for make in engine_makers(settings))
    assert a.own == {"echo_voice": "soft", "rate": 4.5}  # its table's key
    assert b.own == {"echo_voice": "soft", "rate": 1.0}  # the server's, else the default
    config.write_text('engine = "echo"\necho_rate = "fast"\n')
    with pytest.raises(ConfigError, match=r":2: echo_rate: expected a number"):
        Settings.load(str(config), environ={})
    config.write_text('[models.a]\nengine = "echo"\nrat = 2\n')
    with pytest.raises(ConfigError, match=r"unknown key in a model table \(did you mean 'rate'"):
        Settings.load(str(config), environ={})


def test_secret_options_stay_out_of_reprs_and_are_listed_for_the_logs() -> None:
    settings = Settings(api_key="sekrit", upstream_key="upsekrit", upstream="http://up")
    assert "sekrit" not in repr(settings) and "http://up" in repr(settings)
    assert settings.secrets() == ("sekrit", "upsekrit")
    assert Settings().secrets() == ()


def test_unregistered_the_options_are_unknown(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'echo_voice'"):
        Settings(echo_voice="loud")
    config = tmp_path / "tokenpipe.toml"
    config.write_text('echo_voice = "soft"\n')
    with pytest.raises(ConfigError, match="echo_voice: unknown key"):
        Settings.load(str(config), environ={})


@pytest.mark.parametrize("name", [
    "fake", "llamacpp", "openai",
    pytest.param("transformers", marks=pytest.mark.model),  # imports torch: ~20 s
])
def test_each_engine_class_carries_its_registered_kind(name: str) -> None:
    assert sorted(ENGINES) == ["fake", "llamacpp", "openai", "transformers"]  # each listed
    kind = engine_kind(name)
    assert kind.name == name
    try:
        cls = engine_class(name)
    except ImportError:
        if os.environ.get("CI"):  # in CI a missing extra is a failure, not a skip
            raise
        pytest.skip(f"the {name} extra is not installed")
    assert cls.kind is kind
