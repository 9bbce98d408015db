#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the upstream of the openai engine's tests and the
# reference of the benchmarks) from the llama.cpp vendored in the llama-cpp-python sdist
# that .venv has installed, once, into a cache outside the repository:
#   ${XDG_CACHE_HOME:-~/.cache}/tokenpipe/llama-server-VERSION/llama-server
# Idempotent: does nothing when that binary exists. Prints its path. About 4 minutes on
# 2 cores (only the server target, static, no OpenSSL, no web UI download).
# tests/e2e/test_upstream_model.py finds the binary at the same path (LLAMA_SERVER overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[llama-server]\033[0m %s\n' "$*" >&2; }

PY=.venv/bin/python
version=$("$PY" -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
dest="${XDG_CACHE_HOME:-$HOME/.cache}/tokenpipe/llama-server-$version"
if [ -x "$dest/llama-server" ]; then
  echo "$dest/llama-server"
  exit 0
fi

if ! command -v cmake >/dev/null; then
  say "installing cmake from PyPI into .venv"
  "$PY" -m pip install -q --disable-pip-version-check cmake
  export PATH="$PWD/.venv/bin:$PATH"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "fetching the llama-cpp-python $version sdist (pip's cache serves it after the first time)"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$work" "llama-cpp-python==$version"
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"

say "building llama-server $version (about 4 minutes on 2 cores)"
start=$(date +%s)
# Only what llama-server needs: no tests, examples, OpenSSL, curl or prebuilt web UI (that
# one would be downloaded from Hugging Face), and static libraries so the one binary moves.
# The same CPU flags as llama-cpp-python's build (setup.sh): the same kernels on both sides
# of a comparison.
source scripts/cpu-flags.sh
fixes=$(native_fixes)
CFLAGS="${CFLAGS:-} $fixes" CXXFLAGS="${CXXFLAGS:-} $fixes" \
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF -DGGML_CCACHE=OFF \
  -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j"${JOBS:-2}" >"$work/build.log" 2>&1 \
  || { tail -50 "$work/build.log" >&2; exit 1; }
"$work/build/bin/llama-server" --version >/dev/null 2>&1 \
  || { say "the built llama-server does not run"; exit 1; }

mkdir -p "$(dirname "$dest")"
rm -rf "$dest.tmp"
mkdir "$dest.tmp"
cp "$work/build/bin/llama-server" "$dest.tmp/"
rm -rf "$dest"
mv "$dest.tmp" "$dest"  # appears whole or not at all
say "built in $(( $(date +%s) - start )) s: $dest/llama-server"
echo "$dest/llama-server"
