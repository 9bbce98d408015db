"""Which models a server runs: store names resolved in every form --model takes, hub ids
left to the transformers engine, upstream URLs untouched, templates read and checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpipe.cli import main
from tokenpipe.config import Settings
from tokenpipe.engines.base import bundled_model_path
from tokenpipe.model_plans import engine_options, resolve_plans
from tokenpipe.models import ModelNotFound

from .models.layouts import ollama_store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "ollama"
    blob = ollama_store(root, bundled_model_path(), "smol", "latest")
    for var in ("HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    return blob


def test_every_form_of_model_takes_store_names(store: Path) -> None:
    (single,) = resolve_plans(Settings(model="ollama:smol"))
    assert (single.name, single.spec) == ("smol", str(store))
    (kept,) = resolve_plans(Settings(model="smol:latest", model_id="mine"))
    assert (kept.name, kept.spec) == ("mine", str(store))  # --model-id wins
    a, b, up = resolve_plans(Settings(models=("a=ollama:smol:latest", "b=llamacpp:smollm2",
                                              "c=openai:http://127.0.0.1:9")))
    assert (a.name, a.engine, a.spec) == ("a", "llamacpp", str(store))
    assert (b.engine, b.spec) == ("llamacpp", str(bundled_model_path()))
    assert (up.engine, up.spec, up.upstream) == ("openai", None, "http://127.0.0.1:9")


def test_the_transformers_engine_keeps_hub_ids_and_llamacpp_refuses_them(store: Path) -> None:
    (hub,) = resolve_plans(Settings(engine="transformers", model="org/some-model"))
    assert hub.spec == "org/some-model"
    with pytest.raises(ModelNotFound, match="unknown model 'org/some-model'"):
        resolve_plans(Settings(model="org/some-model"))


def test_a_draft_model_name_is_resolved_as_the_models(store: Path, tmp_path: Path) -> None:
    """--draft-model (an option that names a model: Option.names_model) takes the names
    --model takes; a path stays as given; an unknown name fails before anything loads."""
    settings = Settings(model="smollm2", draft_model="ollama:smol")
    (plan,) = resolve_plans(settings)
    assert plan.files == (("draft_model", str(store)),)
    assert engine_options(settings, plan).draft_model == str(store)
    path = tmp_path / "draft.gguf"
    path.write_bytes(b"")
    settings = Settings(model="smollm2", draft_model=str(path))
    (plan,) = resolve_plans(settings)
    assert engine_options(settings, plan).draft_model == str(path)
    with pytest.raises(ModelNotFound, match="unknown model 'no-such-draft'"):
        resolve_plans(Settings(model="smollm2", draft_model="no-such-draft"))


def test_chat_template_flag_and_its_errors(tmp_path: Path, store: Path) -> None:
    good = tmp_path / "t.jinja"
    good.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (plan,) = resolve_plans(Settings(model="smol", chat_template=str(good)))
    assert engine_options(Settings(chat_template=str(good)), plan).chat_template == \
        good.read_text()
    bad = tmp_path / "bad.jinja"
    bad.write_text("\n{% for m in messages %}")
    with pytest.raises(ValueError, match=r"chat template .*bad.jinja:\d+: "):
        resolve_plans(Settings(model="smol", chat_template=str(bad)))
    with pytest.raises(ValueError, match="cannot read it"):
        resolve_plans(Settings(model="smol", chat_template=str(tmp_path / "none")))


def test_serve_exits_2_with_one_line(tmp_path: Path, store: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--model", "smol", "--chat-template", str(tmp_path / "none")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenpipe serve: error: chat template") and err.count("\n") == 1
    config = tmp_path / "c.toml"
    config.write_text("port = 'x'\n")
    assert main(["serve", "--config", str(config)]) == 2
    assert f"{config}:1: port: expected an integer" in capsys.readouterr().err
