#!/usr/bin/env bash
# Installs the test dependencies, then runs every test: the web UI's Vitest suite, then
# pytest (unit, the engine contract on the real model, real servers on free ports, the
# browser). Extra arguments go to pytest (e.g. -k openai) and skip Vitest.
#   scripts/test.sh --quick   the unit and contract tests on the fake engine only (about a
#                             minute): no model, no server, no browser, fewer examples
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--quick" ]; then
  shift  # set up once (the full set-up); later quick runs skip it
  .venv/bin/python -c "import pytest, hypothesis, openai" 2>/dev/null || scripts/setup.sh --test
  exec .venv/bin/python -m pytest -q -p no:cacheprovider --hypothesis-profile quick \
    tests/unit tests/test_engine_contract.py tests/test_sampling_contract.py \
    tests/test_thinking_budget_contract.py tests/test_hop_wire.py \
    -m "not model and not slow and not e2e" -k "not llamacpp and not transformers" "$@"
fi
scripts/setup.sh --test
status=0
if [ -f web/package.json ] && [ $# -eq 0 ]; then
  npm test --prefix web --silent || status=$?
fi
# pytest runs on TOKENPIPE_TEST_WORKERS pytest-xdist workers (default 3; 0 or 1: one
# process), each taking whole modules (tests/conftest.py, group_of), the longest first; on
# a worker the engines decode on one thread (THREADS): the cores stay full while one
# worker waits on a server, a browser or a paced stream.
workers=${TOKENPIPE_TEST_WORKERS:-3}
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers")
.venv/bin/python -m pytest -ra "${parallel[@]}" "$@" || status=$?
exit $status
