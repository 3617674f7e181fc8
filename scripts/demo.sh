#!/usr/bin/env bash
# Run the main demo: the paper's examples on the CPU interpreter (or the GPU where one is present).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
cd "$ROOT"
exec "$VENV/bin/eventtensor" demo "$@"
