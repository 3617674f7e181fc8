# Sourced by the scripts: create (once) a local virtual environment with the package installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EVENTTENSOR_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[eventtensor] creating virtual environment $VENV"
  python3 -m venv --system-site-packages "$VENV"  # sees a system torch where there is one
fi
STAMP="$VENV/.eventtensor-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "[eventtensor] installing eventtensor and test dependencies"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  touch "$STAMP"
fi
PY="$VENV/bin/python"
