"""`tokenpipe models` and store names on real processes: the listing over each store's
layout, name errors (exit 2, one message), the offline hf: error and its speed, a server
started by a store name, a configuration file serving two tables of the bundled model, and
--chat-template changing the prompt the model is given (counted by count_tokens)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, running
from tests.unit.models.layouts import hf_cache, lmstudio_store, ollama_store
from tokenpipe.engines.base import bundled_model_path

pytestmark = pytest.mark.e2e

_STORE_VARS = ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME", "HF_HUB_OFFLINE",
               "HF_ENDPOINT", "TOKENPIPE_CONFIG", "TOKENPIPE_MODEL", "TOKENPIPE_MODEL_DIRS")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _STORE_VARS}
    return {**env, "HOME": str(home), **extra}


def tokenpipe(*args: str, env: dict[str, str],
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenpipe", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    gguf = bundled_model_path()
    home = tmp_path / "home"
    ollama_store(home / ".ollama" / "models", gguf, "smol", "latest")
    lmstudio_store(home / ".lmstudio" / "models", gguf, "pub", "Smol-GGUF", "smol-Q4_1.gguf")
    hf_cache(home / ".cache" / "huggingface" / "hub", gguf, "org/Smol-GGUF", "smol.Q4_1.gguf")
    return home


def test_models_lists_every_store_as_a_table_and_as_json(home: Path) -> None:
    manifest = (home / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library"
                / "broken" / "latest")
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{")
    env = clean_env(home)
    table = tokenpipe("models", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "QUANT", "CONTEXT", "PATH"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["bundled:smollm2", "ollama:smol:latest",
                     "lmstudio:pub/Smol-GGUF/smol-Q4_1.gguf", "hf:org/Smol-GGUF/smol.Q4_1.gguf"]
    assert all(line.split()[1:5] == ["98.4", "MB", "Q4_1", "8192"] for line in lines[1:])
    assert "Traceback" not in table.stderr
    assert table.stderr.startswith("warning: ollama: unreadable manifest")
    doc = json.loads(tokenpipe("models", "--json", env=env).stdout)
    assert [m["name"] for m in doc["models"]] == names
    first = doc["models"][1]
    assert first["size_bytes"] == bundled_model_path().stat().st_size
    assert (first["quantization"], first["context_length"], first["store"]) == (
        "Q4_1", 8192, "ollama")
    assert len(doc["warnings"]) == 1


def test_model_dirs_from_the_config_file_are_listed(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "m.gguf").symlink_to(bundled_model_path())
    config = tmp_path / "t.toml"
    config.write_text('model_dirs = ["mine"]\n')
    out = tokenpipe("models", "--config", str(config), env=clean_env(home))
    assert "dir:m.gguf" in out.stdout, out.stderr


@pytest.mark.parametrize(("spec", "says"), [
    ("nosuch", "unknown model 'nosuch'"),
    ("ollama:nosuch", "unknown model 'ollama:nosuch'"),
    ("Q4_1", "unknown model 'Q4_1'"),
])
def test_a_bad_name_is_exit_2_with_the_candidates(home: Path, spec: str, says: str) -> None:
    out = tokenpipe("serve", "--model", spec, env=clean_env(home))
    assert out.returncode == 2
    assert says in out.stderr and "ollama:smol:latest" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_an_ambiguous_name_is_exit_2_naming_both(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")  # its own file: resolution never reads it
    (home / ".lmstudio" / "models" / "pub2" / "Smol-GGUF").mkdir(parents=True)
    (home / ".lmstudio" / "models" / "pub2" / "Smol-GGUF" / "smol-Q4_1.gguf").symlink_to(other)
    out = tokenpipe("serve", "--model", "Smol-GGUF/smol-Q4_1.gguf", env=clean_env(home))
    assert out.returncode == 2, out.stderr
    assert "ambiguous" in out.stderr and "lmstudio:pub2/Smol-GGUF/smol-Q4_1.gguf" in out.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: connections refused


@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE", "closed port"])
def test_hf_not_in_the_cache_offline_says_so_at_once(home: Path, offline: str) -> None:
    extra = ({"HF_HUB_OFFLINE": "1"} if offline == "HF_HUB_OFFLINE"
             else {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"})
    started = time.monotonic()
    out = tokenpipe("serve", "--model", "hf:org/Missing-GGUF:Q4_K_M", env=clean_env(home, **extra))
    took = time.monotonic() - started
    print(f"offline hf: error ({offline}) after {took:.2f} s")
    assert out.returncode == 2
    assert "'hf:org/Missing-GGUF:Q4_K_M' is not in the Hugging Face cache" in out.stderr
    assert "get it with: hf download org/Missing-GGUF --include '*Q4_K_M*.gguf'" in out.stderr
    assert took < 30  # generous: the process start is most of it; no hub timeout waited


@pytest.mark.model
async def test_a_server_started_by_a_store_name_answers_on_the_real_model(
        home: Path, tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"  # OLLAMA_MODELS moves the store
    ollama_store(store, bundled_model_path(), "smol", "135m")
    server = ServerProcess(("--model", "ollama:smol:135m", "--parallel", "1", "--ctx-size",
                            "1024"), env=clean_env(home, OLLAMA_MODELS=str(store)))
    with running(server):
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            models = (await client.get("/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["smol:135m"]
            r = await client.post("/v1/chat/completions", json={
                "model": "smol:135m", "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["model"] == "smol:135m" and body["usage"]["completion_tokens"] > 0
            assert body["choices"][0]["message"]["content"]


MARKER_TEMPLATE = """MARKER MARKER {% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def _count(vocab: Any, text: str) -> int:
    return len(vocab.tokenize(text))


@pytest.fixture(scope="module")
def vocab() -> Any:
    """The bundled model's tokenizer, vocabulary only (no weights), to count expected text."""
    lc = pytest.importorskip("llama_cpp")
    from llama_cpp import _logger as llama_logger

    from tokenpipe.engines.llamacpp.vocab import Vocab

    llama_logger.set_verbose(False)  # llama.cpp prints every key it reads
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(bundled_model_path()).encode(), params)
    yield Vocab(model)
    lc.llama_model_free(model)


@pytest.mark.model
async def test_a_config_file_serves_its_tables_and_a_template_replaces_the_ggufs(
        tmp_path: Path, home: Path, vocab: Any) -> None:
    (tmp_path / "marker.jinja").write_text(MARKER_TEMPLATE)
    config = tmp_path / "tokenpipe.toml"
    config.write_text('ctx_size = 2048\nparallel = 2\n\n[models.plain]\nsource = "smollm2"\n\n'
                      '[models.marked]\nsource = "bundled:smollm2"\n'
                      'chat_template = "marker.jinja"\nmax_tokens = 5\n')
    server = ServerProcess(("--config", str(config)), env=clean_env(home))
    messages = [{"role": "user", "content": "Hello there"}]
    with running(server):
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            listed = (await client.get("/v1/models")).json()
            assert [m["id"] for m in listed["data"]] == ["plain", "marked"]
            counts = {}
            for name in ("plain", "marked"):
                r = await client.post("/v1/messages/count_tokens",
                                      json={"model": name, "messages": messages})
                assert r.status_code == 200, r.text
                counts[name] = r.json()["input_tokens"]
            default = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                       "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHello there"
                       "<|im_end|>\n<|im_start|>assistant\n")
            marked = ("MARKER MARKER <|im_start|>user\nHello there<|im_end|>\n"
                      "<|im_start|>assistant\n")
            assert counts == {"plain": _count(vocab, default), "marked": _count(vocab, marked)}
            r = await client.post("/v1/chat/completions", json={
                "model": "marked", "temperature": 0, "messages": messages})
            usage = r.json()["usage"]  # no max_tokens: the table's default of 5
            assert usage["prompt_tokens"] == counts["marked"]
            assert 0 < usage["completion_tokens"] <= 5
