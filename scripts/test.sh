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
# TOKENPIPE_TEST_WORKERS=N runs pytest on N pytest-xdist workers, a module on one worker
# (tests/conftest.py). Not the default: on 2 cores 3 workers' model servers decode at once
# (3 x 2 threads): a 3-worker run finished 23 tests a minute where a serial one averages 57.
workers=${TOKENPIPE_TEST_WORKERS:-0}
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadgroup)
.venv/bin/python -m pytest -ra "${parallel[@]}" "$@" || status=$?
exit $status
