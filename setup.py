"""One build step on top of pyproject.toml: a wheel (or `pip install .`) carries the built web
UI, made by the Vite build in web/ into src/tokenpipe/server/static. An editable install
skips it: scripts/setup.sh builds the UI itself, and Node is optional there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
WEB = ROOT / "web"
STATIC = Path("src", "tokenpipe", "server", "static")
NODE_MIN = (20, 19)  # web/package.json's engines.node
NEEDS = ("building the wheel needs Node 20 and npm for the web UI; "
         "or set TOKENPIPE_SKIP_UI=1 to build without it")


def _skip_ui() -> bool:
    return os.environ.get("TOKENPIPE_SKIP_UI", "").strip().lower() in ("1", "true", "yes")


def _npm() -> str:
    """npm, where Node is recent enough for the UI's build; else what to do."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise SystemExit(f"error: {NEEDS} ({'node' if node is None else 'npm'} not found)")
    found = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    numbers = re.match(r"v(\d+)\.(\d+)", found)
    if numbers is None or tuple(map(int, numbers.groups())) < NODE_MIN:
        raise SystemExit(f"error: {NEEDS} (found Node {found or 'of unknown version'}; "
                         f"the UI needs {NODE_MIN[0]}.{NODE_MIN[1]} or later)")
    return npm


def build_ui() -> None:
    if not (WEB / "package.json").is_file():
        raise SystemExit(f"error: {WEB / 'package.json'} is missing; "
                         "set TOKENPIPE_SKIP_UI=1 to build without the web UI")
    npm = _npm()
    if not (WEB / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=WEB, check=True)
    subprocess.run([npm, "run", "build", "--silent"], cwd=WEB, check=True)
    if not (ROOT / STATIC / "index.html").is_file():
        raise SystemExit(f"error: the web UI build left no {STATIC / 'index.html'}")


class BuildPyWithUI(build_py):
    """build_py that first runs the UI build, so package_data's server/static/** has it."""

    def run(self) -> None:
        if not self.editable_mode:
            if _skip_ui():
                print("TOKENPIPE_SKIP_UI is set: the wheel has no web UI (/ says so)")
            else:
                build_ui()
            self.__dict__.pop("data_files", None)  # found lazily: look again, after the build
            # build/lib outlives a build: no asset of an older UI build (or a skipped one)
            shutil.rmtree(Path(self.build_lib, *STATIC.parts[1:]), ignore_errors=True)
        super().run()

    def find_data_files(self, package: str, src_dir: str) -> list[str]:
        files: list[str] = super().find_data_files(package, src_dir)
        if _skip_ui():  # an older build in the tree does not slip in
            files = [f for f in files if not Path(f).is_relative_to(STATIC)]
        return files


setup(cmdclass={"build_py": BuildPyWithUI})
