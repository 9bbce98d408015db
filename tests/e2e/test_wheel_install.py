"""tokenpipe installed like a tool: `python -m build` makes an sdist and, from it, a wheel that
carries the built web UI; installed into a fresh venv (pip, then `uv tool install`) and run
on a PATH without Node, it serves the chat page and streams from the bundled model. Without
Node the build says what to do; TOKENPIPE_SKIP_UI=1 builds a wheel whose / says it has no UI.

Slow (a build, a venv, installs from pip's cache: about a minute warm) but it runs in CI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import LOGS, ROOT, ServerProcess, free_port, running

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
if not os.environ.get("CI"):  # in CI a missing part is a failure, not a skip
    pytest.importorskip("build", reason="the test extra (python -m build) is not installed")
    if shutil.which("npm") is None:
        pytest.skip("building the wheel needs Node and npm", allow_module_level=True)

NO_UI = "the web UI was not built"


def clean_env(path: str, **extra: str) -> dict[str, str]:
    """This process's environment without what points into the checkout (PYTHONPATH, the
    shared venv) or configures tokenpipe, on `path`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("TOKENPIPE_")}
    return {**env, "PATH": path, **extra}


def native_flags() -> dict[str, str]:
    """CFLAGS/CXXFLAGS that keep a llama-cpp-python compile runnable on this CPU
    (scripts/cpu-flags.sh, as setup.sh uses them), for an install that has to compile it."""
    fixes = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/cpu-flags.sh; native_fixes"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
    return {k: f"{os.environ.get(k, '')} {fixes}".strip() for k in ("CFLAGS", "CXXFLAGS")}


def build_env(path: str, **extra: str) -> dict[str, str]:
    """For `python -m build`: PYTHONPATH stays (where `build` itself may come from); the
    backend reads only the tree it builds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENPIPE_")}
    return {**env, "PATH": path, **extra}


def run(cmd: list[str], *, timeout: float, env: dict[str, str] | None = None,
        cwd: Path | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd)
    if ok and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def no_node(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with nothing on it (no node, no npm)."""
    empty = tmp_path_factory.mktemp("empty-path")
    assert shutil.which("node", path=str(empty)) is None
    return str(empty)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build`: the sdist, and the wheel built from it (so from web/ sources)."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], timeout=600,
        env=build_env(os.environ["PATH"]))
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("tokenpipe-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with `pip install 'WHEEL[llamacpp]'` (llama-cpp-python from pip's cache
    where an earlier install built it; else it compiles, minutes)."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", str(where)], timeout=120)
    run([str(where / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", f"{wheel}[llamacpp]"], timeout=900,
        env=clean_env(os.environ["PATH"], **native_flags()))
    return where


class InstalledServer(ServerProcess):
    """`tokenpipe serve` from an installed entry point, on a PATH without Node, in an empty
    folder, with nothing of the checkout in its environment."""

    def __init__(self, command: list[str], path: str, workdir: Path, *args: str,
                 **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"server-{self.port}.log"
        self._log = self.log_path.open("wb")
        environ = clean_env(path, TOKENPIPE_RESPONSES_DB=str(workdir / "responses.sqlite3"),
                            **env)
        self.proc = subprocess.Popen([*command, "serve", "--port", str(self.port), *args],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env=environ, cwd=workdir)


def assert_serves_ui_and_streams(server: InstalledServer) -> None:
    page = httpx.get(server.url + "/", timeout=10)
    assert page.status_code == 200, page.text
    assert NO_UI not in page.text and '<div id="root">' in page.text
    script = re.search(r'src="\.?/?(assets/[\w.-]+\.js)"', page.text)
    assert script is not None, page.text
    asset = httpx.get(f"{server.url}/{script.group(1)}", timeout=10)
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    body = {"messages": [{"role": "user", "content": "Say hello."}], "stream": True,
            "max_tokens": 8, "temperature": 0}
    chunks, done = [], False
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body,
                      timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    assert done
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"])
    assert text.strip(), chunks
    assert {c["model"] for c in chunks} == {"SmolLM2-135M-Instruct"}
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_the_wheel_carries_the_built_ui_and_the_sdist_its_sources(dist: Path,
                                                                  wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "tokenpipe/server/static/index.html" in names
    assert any(re.fullmatch(r"tokenpipe/server/static/assets/.+\.js", n) for n in names)
    (sdist,) = dist.glob("tokenpipe-*.tar.gz")
    members = tarfile.open(sdist).getnames()
    assert any(m.endswith("/web/package-lock.json") for m in members)
    assert not any("/node_modules/" in m or "/server/static/" in m for m in members)


def test_pip_install_serves_the_page_and_the_bundled_model_without_node(
        venv: Path, no_node: str, tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    where = run([python, "-c", "import tokenpipe; print(tokenpipe.__file__)"], timeout=60,
                env=clean_env(no_node), cwd=tmp_path).stdout
    assert where.startswith(str(venv)), where  # the installed package, not the checkout
    with running(InstalledServer([str(venv / "bin" / "tokenpipe")], no_node,
                                 tmp_path)) as server:
        assert_serves_ui_and_streams(server)


def test_uv_tool_install_serves_the_page_without_node(
        venv: Path, wheel: Path, no_node: str, tmp_path: Path) -> None:
    """uv is not on this machine: pip installs it into the test venv. Its resolver takes
    llama-cpp-python from pip's wheel cache (--find-links), not a fresh compile."""
    uv = shutil.which("uv") or str(venv / "bin" / "uv")
    if not Path(uv).exists():
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", "uv"], timeout=300,
            env=clean_env(os.environ["PATH"]))
    cached = run([str(venv / "bin" / "python"), "-m", "pip", "cache", "list",
                  "llama_cpp_python", "--format=abspath"], timeout=60).stdout.split()
    links = [arg for w in cached[:1] for arg in ("--find-links", str(Path(w).parent))]
    tools, bins = tmp_path / "tools", tmp_path / "bin"
    run([uv, "tool", "install", "--python", str(venv / "bin" / "python"), *links,
         f"{wheel}[llamacpp]"], timeout=900,
        env=clean_env(os.environ["PATH"], UV_TOOL_DIR=str(tools), UV_TOOL_BIN_DIR=str(bins),
                      UV_NATIVE_TLS="1", **native_flags()))
    with running(InstalledServer([str(bins / "tokenpipe")], no_node, tmp_path)) as server:
        assert_serves_ui_and_streams(server)


@pytest.fixture
def sdist_tree(dist: Path, tmp_path: Path) -> Path:
    (sdist,) = dist.glob("tokenpipe-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (tree,) = tmp_path.glob("tokenpipe-*")
    return tree


def test_without_node_the_build_says_what_to_do_and_skip_ui_builds_without_it(
        sdist_tree: Path, venv: Path, no_node: str, tmp_path: Path) -> None:
    # --no-isolation: setup.py's own behaviour, without a build venv each (the isolated
    # build is the `dist` fixture's)
    out = tmp_path / "out"
    failed = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                  str(out), str(sdist_tree)], timeout=600, env=build_env(no_node), ok=False)
    assert failed.returncode != 0
    assert ("building the wheel needs Node 20 and npm for the web UI; or set "
            "TOKENPIPE_SKIP_UI=1 to build without it") in failed.stdout + failed.stderr
    assert not list(out.glob("*.whl"))

    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(sdist_tree)], timeout=600, env=build_env(no_node, TOKENPIPE_SKIP_UI="1"))
    (bare,) = out.glob("tokenpipe-*.whl")
    assert not any("/static/" in n for n in zipfile.ZipFile(bare).namelist())
    # served from the venv's dependencies with this wheel's package first on the path
    target = tmp_path / "bare"
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
         "--disable-pip-version-check", "--target", str(target), str(bare)], timeout=300,
        env=clean_env(os.environ["PATH"]))
    # the page needs no model: the fake engine starts at once
    with running(InstalledServer([str(venv / "bin" / "python"), "-m", "tokenpipe"], no_node,
                                 tmp_path, "--engine", "fake", PYTHONPATH=str(target))) as server:
        page = httpx.get(server.url + "/", timeout=10)
        assert page.status_code == 200 and NO_UI in page.text
