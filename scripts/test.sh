#!/usr/bin/env bash
# Installs the test dependencies, then runs every test: the web UI's Vitest suite, then
# pytest (unit, the engine contract on the real model, real servers on free ports, the
# browser). Extra arguments go to pytest (e.g. -k openai) and skip Vitest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
status=0
if [ -f web/package.json ] && [ $# -eq 0 ]; then
  npm test --prefix web --silent || status=$?
fi
.venv/bin/python -m pytest -ra "$@" || status=$?
exit $status
