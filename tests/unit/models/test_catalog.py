"""Each store's real layout in a temporary HOME around the bundled GGUF: what is found,
under which names, and how a name resolves (each prefix, bare, ambiguous, unknown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenpipe.engines.base import bundled_model_path
from tokenpipe.models import ModelNotFound, Places, resolve
from tokenpipe.models.listing import rows

from .layouts import hf_cache, lmstudio_store, ollama_store, tiny_gguf


@pytest.fixture(scope="module")
def gguf() -> Path:
    return bundled_model_path()


@pytest.fixture
def home(tmp_path: Path, gguf: Path) -> Path:
    """A HOME with one model in each store, at each store's default place."""
    home = tmp_path / "home"
    ollama_store(home / ".ollama" / "models", gguf, "smol", "latest")
    ollama_store(home / ".ollama" / "models", gguf, "smol", "135m-q4")
    ollama_store(home / ".ollama" / "models", gguf, "tiny", "v1", namespace="someone")
    lmstudio_store(home / ".lmstudio" / "models", gguf, "lmstudio-community",
                   "SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf")
    lmstudio_store(home / ".cache" / "lm-studio" / "models", gguf, "old", "Legacy-GGUF",
                   "legacy-q4_1.gguf")
    hf_cache(home / ".cache" / "huggingface" / "hub", gguf, "HuggingFaceTB/SmolLM2-GGUF",
             "smollm2-135m-q4_1.gguf")
    return home


def places(home: Path, **env: str) -> Places:
    return Places(environ={"HOME": str(home), **env})


def test_every_store_is_found_under_its_own_names(home: Path) -> None:
    found = places(home).scan()
    assert found.warnings == []
    assert sorted(e.qualified for e in found.entries) == [
        "bundled:smollm2",
        "hf:HuggingFaceTB/SmolLM2-GGUF/smollm2-135m-q4_1.gguf",
        "lmstudio:lmstudio-community/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf",
        "lmstudio:old/Legacy-GGUF/legacy-q4_1.gguf",
        "ollama:smol:135m-q4",
        "ollama:smol:latest",
        "ollama:someone/tiny:v1",
    ]


def test_the_listing_reads_size_quantization_and_context_from_the_header(
        home: Path, gguf: Path) -> None:
    found, warnings = rows(places(home))
    assert warnings == []
    for row in found:
        assert row.size == gguf.stat().st_size
        assert (row.header.quantization, row.header.context_length) == ("Q4_1", 8192)
        assert row.header.architecture == "llama"


def test_environment_variables_move_the_stores(tmp_path: Path, gguf: Path) -> None:
    ollama_store(tmp_path / "o", gguf, "moved", "1b")
    hf_cache(tmp_path / "h" / "hub", gguf, "org/moved", "m.gguf")
    hf_cache(tmp_path / "c", gguf, "org/cached", "c.gguf")
    home = tmp_path / "empty"
    with_home = {e.qualified for e in places(home, OLLAMA_MODELS=str(tmp_path / "o"),
                                             HF_HOME=str(tmp_path / "h")).scan().entries}
    assert {"ollama:moved:1b", "hf:org/moved/m.gguf"} <= with_home
    hub = {e.qualified for e in places(home, HF_HOME=str(tmp_path / "h"),
                                       HF_HUB_CACHE=str(tmp_path / "c")).scan().entries}
    assert "hf:org/cached/c.gguf" in hub and "hf:org/moved/m.gguf" not in hub


@pytest.mark.parametrize(("spec", "name"), [
    ("ollama:smol:latest", "smol:latest"),
    ("ollama:smol", "smol"),  # Ollama's :latest
    ("smol:135m-q4", "smol:135m-q4"),
    ("someone/tiny:v1", "someone/tiny:v1"),
    ("hf:HuggingFaceTB/SmolLM2-GGUF/smollm2-135m-q4_1.gguf",
     "HuggingFaceTB/SmolLM2-GGUF/smollm2-135m-q4_1.gguf"),
    ("hf:HuggingFaceTB/SmolLM2-GGUF", "HuggingFaceTB/SmolLM2-GGUF"),  # its one GGUF
    ("hf:huggingfacetb/smollm2-gguf:q4_1", "huggingfacetb/smollm2-gguf:q4_1"),
    ("lmstudio:old/Legacy-GGUF/legacy-q4_1.gguf", "old/Legacy-GGUF/legacy-q4_1.gguf"),
    ("legacy-q4_1", "legacy-q4_1"),  # a file's stem, bare
    ("smollm2", "smollm2"),
    ("bundled:smollm2", "smollm2"),
])
def test_names_resolve_to_the_store_file(home: Path, spec: str, name: str) -> None:
    found = resolve(spec, places(home))
    assert found is not None and found.name == name
    assert found.path.is_file() and found.path.stat().st_size == bundled_model_path().stat().st_size


def test_the_same_file_in_two_stores_is_one_model(tmp_path: Path, gguf: Path) -> None:
    home = tmp_path / "home"
    hf = hf_cache(home / ".cache" / "huggingface" / "hub", gguf, "org/r", "same.gguf")
    (home / ".lmstudio" / "models" / "org" / "r").mkdir(parents=True)
    (home / ".lmstudio" / "models" / "org" / "r" / "same.gguf").symlink_to(hf)
    found = resolve("same", places(home))
    assert found is not None and found.path.samefile(gguf)


def test_an_ambiguous_name_lists_each_candidate(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tiny_gguf(home / ".lmstudio" / "models" / "a" / "r" / "model-Q4_K_M.gguf")
    tiny_gguf(home / ".lmstudio" / "models" / "b" / "r" / "model-Q4_K_M.gguf")
    with pytest.raises(ModelNotFound) as info:
        resolve("model-Q4_K_M", places(home))
    text = str(info.value)
    assert "ambiguous" in text
    assert "lmstudio:a/r/model-Q4_K_M.gguf" in text and "lmstudio:b/r/model-Q4_K_M.gguf" in text
    found = resolve("lmstudio:b/r/model-Q4_K_M.gguf", places(home))  # the full name is one
    assert found is not None and found.path.parent.parent.name == "b"


def test_a_repo_with_several_ggufs_is_picked_by_its_quant_suffix(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    for quant in ("Q4_K_M", "Q8_0"):
        hf_cache(root, tiny_gguf(tmp_path / f"{quant}.src"), "org/repo",
                 f"model-{quant}.gguf", revision="b" * 40)
    env = {"HOME": str(tmp_path), "HF_HUB_CACHE": str(root)}
    with pytest.raises(ModelNotFound, match=r"ambiguous.*model-Q4_K_M.gguf.*model-Q8_0.gguf"):
        resolve("hf:org/repo", Places(environ=env))
    found = resolve("hf:org/repo:Q8_0", Places(environ=env))
    assert found is not None and found.path.name == "model-Q8_0.gguf"


def test_an_unknown_name_lists_what_there_is(home: Path) -> None:
    with pytest.raises(ModelNotFound) as info:
        resolve("llama3.2:1b", places(home))
    text = str(info.value)
    assert text.startswith("unknown model 'llama3.2:1b'")
    assert "ollama:smol:latest" in text and "bundled:smollm2" in text
    with pytest.raises(ModelNotFound, match=r"unknown model 'lmstudio:nope'.*in the lmstudio "
                                            r"store.*lmstudio:old/Legacy-GGUF"):
        resolve("lmstudio:nope", places(home))


def test_paths_and_hub_ids_are_not_names(home: Path, gguf: Path) -> None:
    assert resolve(str(gguf), places(home)) is None
    # the transformers engine takes hub ids: a name no store knows is left to it
    assert resolve("HuggingFaceTB/SmolLM2-135M-Instruct", places(home), strict=False) is None


def test_a_broken_store_is_warnings_and_the_rest_still_listed(home: Path, gguf: Path) -> None:
    manifests = home / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library"
    (manifests / "bad").mkdir()
    (manifests / "bad" / "latest").write_text("{not json")
    (manifests / "nolayer").mkdir()
    (manifests / "nolayer" / "latest").write_text(json.dumps({"layers": []}))
    (manifests / "gone").mkdir()
    (manifests / "gone" / "latest").write_text(json.dumps({"layers": [{
        "mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "f" * 64}]}))
    snap = home / ".cache" / "huggingface" / "hub" / "models--org--half" / "snapshots" / "c"
    snap.mkdir(parents=True)
    (snap / "half.gguf").symlink_to("../../blobs/missing")  # an unfinished download
    found = places(home).scan()
    text = "\n".join(found.warnings)
    assert len(found.warnings) == 4, text
    assert "unreadable manifest" in text and "names no single model layer" in text
    assert "half.gguf is a dangling symlink" in text and "sha256-" + "f" * 64 in text
    assert "ollama:smol:latest" in {e.qualified for e in found.entries}


def test_model_dirs_are_listed_by_their_relative_names(tmp_path: Path, gguf: Path) -> None:
    from .layouts import link

    link(gguf, tmp_path / "models" / "sub" / "mine.gguf")
    tiny_gguf(tmp_path / "models" / "mmproj-vision.gguf")  # a projector, not a model
    tiny_gguf(tmp_path / "models" / "big-00002-of-00002.gguf")  # a later shard
    p = Places(environ={"HOME": str(tmp_path / "h")}, model_dirs=(str(tmp_path / "models"),
                                                                    str(tmp_path / "none")))
    found = p.scan("dir")
    assert [e.qualified for e in found.entries] == ["dir:sub/mine.gguf"]
    assert found.warnings == [f"model_dirs: {tmp_path / 'none'} is not a folder"]
    resolved = resolve("mine", p)
    assert resolved is not None and resolved.path == tmp_path / "models" / "sub" / "mine.gguf"
