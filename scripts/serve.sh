#!/usr/bin/env bash
# Sets up whatever is missing, then serves on 127.0.0.1:8000 with the bundled model.
# Extra arguments go to `tokenpipe serve` (e.g. --port 9000 --engine fake).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/tokenpipe serve "$@"
