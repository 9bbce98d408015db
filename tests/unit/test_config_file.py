"""The configuration file: every key checked, errors naming key and line, precedence flag >
environment > file > default, model tables and their sampling defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpipe.config import Settings
from tokenpipe.config_file import ConfigError, parse_duration
from tokenpipe.model_plans import engine_options, plans

CONFIG = """\
# a server and two models
port = 9100
parallel = 2
allowed_origins = ["https://a.example", "https://b.example"]
engine = "fake"

[models.small]
engine = "fake"
source = "smol.gguf"
context = 2048
temperature = 0.2
max_tokens = 64
stop = ["END"]
keep_alive = "5m"

[models.big]
source = "http://gpu:8000"
engine = "openai"
keep_alive = -1
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tokenpipe.toml"
    path.write_text(text)
    return str(path)


def test_the_file_sets_server_keys_and_model_tables(tmp_path: Path) -> None:
    s = Settings.load(write(tmp_path, CONFIG), environ={})
    assert (s.port, s.parallel, s.engine) == (9100, 2, "fake")
    assert s.allowed_origins == ("https://a.example", "https://b.example")
    small, big = s.model_configs
    assert (small.name, small.context, small.keep_alive_s) == ("small", 2048, 300.0)
    assert small.default("temperature") == 0.2 and small.default("stop") == ("END",)
    assert big.keep_alive_s == -1.0
    got = plans(s)
    assert [(p.name, p.engine, p.spec, p.upstream) for p in got] == [
        ("small", "fake", "smol.gguf", None), ("big", "openai", None, "http://gpu:8000")]
    assert engine_options(s, got[0]).context_size == 2048
    assert engine_options(s, got[1]).upstream == "http://gpu:8000"
    assert s.default_max_tokens_for("small") == 64
    assert s.default_max_tokens_for("big") == s.default_max_tokens == 512


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 9100\nparallel = 2\nctx_size = 4096\n")
    env = {"TOKENPIPE_PORT": "9200", "TOKENPIPE_PARALLEL": "3"}
    s = Settings.load(path, environ=env, port=9300)
    assert s.port == 9300  # flag over environment and file
    assert s.parallel == 3  # environment over file
    assert s.ctx_size == 4096  # file over default
    assert s.max_queue == Settings().max_queue  # default
    assert Settings.load(environ={**env, "TOKENPIPE_CONFIG": path}).ctx_size == 4096


def test_models_given_as_flags_are_the_ones_served_with_their_tables(tmp_path: Path) -> None:
    s = Settings.load(write(tmp_path, CONFIG), environ={}, models=("small=fake:other",))
    (plan,) = plans(s)
    assert (plan.name, plan.spec) == ("small", "other")
    assert plan.config is not None and plan.config.context == 2048


def test_relative_paths_are_the_files_own(tmp_path: Path) -> None:
    (tmp_path / "smol.gguf").write_bytes(b"x")
    (tmp_path / "t.jinja").write_text("{{ messages[0]['content'] }}")
    s = Settings.load(write(tmp_path, CONFIG.replace('context = 2048', 'chat_template = '
                                                     '"t.jinja"')), environ={})
    small = s.model_configs[0]
    assert small.source == str(tmp_path / "smol.gguf")
    assert engine_options(s, plans(s)[0]).chat_template == "{{ messages[0]['content'] }}"
    # a draft model too (an option that names a model), as a server key and in a table
    (tmp_path / "draft.gguf").write_bytes(b"x")
    s = Settings.load(write(tmp_path, CONFIG.replace('context = 2048', 'draft_model = '
                                                     '"draft.gguf"')), environ={})
    assert s.model_configs[0].engine_key("draft_model") == str(tmp_path / "draft.gguf")
    s = Settings.load(write(tmp_path, 'draft_model = "draft.gguf"\n'), environ={})
    assert s.draft_model == str(tmp_path / "draft.gguf")


@pytest.mark.parametrize(("text", "message"), [
    ("port = 1\nprot = 2\n", r":2: prot: unknown key \(did you mean 'port'\?\)"),
    ("\n\nport = \"eighty\"\n", r":3: port: expected an integer, got a string \('eighty'\)"),
    ("max_prompt_tokens = 1.5\n", r":1: max_prompt_tokens: expected an integer"),
    ("allowed_hosts = [1, 2]\n", r":1: allowed_hosts: expected a list of strings"),
    ("fake_pace_ms = true\n", r":1: fake_pace_ms: expected a number, got a boolean"),
    ("models = 3\n", r":1: models: must be tables"),
    ("port = 1\n[models.a]\nengine = \"fake\"\n\n[models.b]\ncontext = \"big\"\n",
     r":6: models.b.context: expected an integer, got a string"),
    ("[models.a]\ncontext = 1\n[models.b]\ncontxt = 1\n",
     r":4: models.b.contxt: unknown key in a model table \(did you mean 'context'\?\)"),
    ("[models.a]\nkeep_alive = \"soon\"\n", r":2: models.a.keep_alive: expected a duration"),
    ("[models.a]\ntemperature = \"hot\"\n", r":2: models.a.temperature: expected a number"),
    ("models = 1\n", r"models: must be tables"),
    ("[models]\nx = 1\n", r":2: models.x: must be a table"),
    ("plans = 1\n", r":1: plans: unknown key"),
    ("port = = 1\n", r"not valid TOML: .*line 1"),
    ('model = "a"\n[models.b]\n', r"either model = \.\.\. or \[models.NAME\] tables"),
])
def test_a_mistake_names_the_key_and_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as info:
        Settings.load(path, environ={})
    assert str(info.value).startswith(path) or "either model" in str(info.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        Settings.load(str(tmp_path / "none.toml"), environ={})


@pytest.mark.parametrize(("value", "seconds"), [
    (30, 30.0), (2.5, 2.5), ("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("-1", -1.0),
    ("250ms", 0.25), ("0", 0.0),
])
def test_keep_alive_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["5 minutes", "m5", "", True, [1]])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="a duration"):
        parse_duration(value)


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    s = Settings.load(write(tmp_path, block), environ={})
    assert [m.name for m in s.model_configs] == ["small", "big"]
    assert s.model_dirs == (str(tmp_path / "models"),)
    assert s.model_configs[0].keep_alive_s == 300.0
