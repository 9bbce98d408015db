"""hf: names not in the cache, downloaded from a hub (a loopback stand-in: no network here)
into the cache tokenpipe models reads; a partial download resumes; the hub's refusals are
one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpipe.models import ModelNotFound, Places, resolve

from .fake_hub import fake_hub

pytest.importorskip("huggingface_hub")

MODEL = b"GGUF" + bytes(range(256)) * 64


def places(tmp_path: Path, url: str) -> Places:
    return Places(environ={"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub"),
                           "HF_ENDPOINT": url})


def test_a_repo_name_downloads_its_gguf_once(tmp_path: Path) -> None:
    with fake_hub({"org/repo/m-Q4_K_M.gguf": MODEL, "org/repo/m-Q8_0.gguf": b"GGUF8",
                   "org/repo/README.md": b"hi"}) as hub:
        p = places(tmp_path, hub.url)
        found = resolve("hf:org/repo:Q4_K_M", p)
        assert found is not None and found.path.read_bytes() == MODEL
        assert found.path.is_relative_to(tmp_path / "hub" / "models--org--repo" / "snapshots")
        asked = len(hub.requests)
        again = resolve("hf:org/repo/m-Q4_K_M.gguf", p)  # now in the cache: no request
        assert again is not None and again.path == found.path and len(hub.requests) == asked
        assert {e.qualified for e in p.scan("hf").entries} == {"hf:org/repo/m-Q4_K_M.gguf"}
        with pytest.raises(ModelNotFound, match=r"several GGUF files: hf:org/repo/m-Q4_K_M.gguf"
                                                r", hf:org/repo/m-Q8_0.gguf"):
            resolve("hf:org/repo", places(tmp_path / "fresh", hub.url))


def test_a_download_cut_off_midway_resumes_where_it_stopped(tmp_path: Path) -> None:
    """Within one download: huggingface_hub asks for the rest (Range) after a dropped
    connection. Across processes it does not (since huggingface/huggingface_hub#4228 each
    process writes its own temporary file): an interrupted `tokenpipe serve` starts over."""
    from huggingface_hub import constants

    chunk = constants.DOWNLOAD_CHUNK_SIZE  # what it has written when the link drops
    big = bytes(range(256)) * ((chunk + chunk // 2) // 256)
    with fake_hub({"org/repo/m.gguf": big}, drop_after=chunk + 5000) as hub:
        found = resolve("hf:org/repo/m.gguf", places(tmp_path, hub.url))
        assert found is not None and found.path.read_bytes() == big
        gets = [r for r in hub.requests if r[0] == "GET"]
        assert len(gets) == 2 and gets[0][2] is None
        assert gets[1][2] is not None and gets[1][2].startswith("bytes=")
        assert int(gets[1][2].removeprefix("bytes=").rstrip("-")) == chunk


@pytest.mark.parametrize(("name", "says"), [
    ("hf:org/repo/none.gguf", "'hf:org/repo/none.gguf': "),
    ("hf:org/nothing", "'hf:org/nothing': "),
    ("hf:org/repo:Q2_K", "the repo has no Q2_K GGUF file"),
    ("hf:justone", "expected hf:ORG/REPO"),
])
def test_what_the_hub_refuses_is_one_error(tmp_path: Path, name: str, says: str) -> None:
    with fake_hub({"org/repo/m.gguf": MODEL}) as hub:
        with pytest.raises(ModelNotFound) as info:
            resolve(name, places(tmp_path, hub.url))
    assert says in str(info.value) and "\n" not in str(info.value)
