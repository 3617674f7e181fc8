#!/usr/bin/env bash
# Run the test suite (CPU tests everywhere; GPU tests run only where a GPU is present).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
cd "$ROOT"
exec "$PY" -m pytest -q "$@"
