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
  PIP=("$VENV/bin/python" -m pip install -q --no-cache-dir)
  "${PIP[@]}" --upgrade pip
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    # The tests need torch only on the CPU: prefer its CPU build (a few hundred MB) where the
    # package index has it, over the CUDA build (several GB) that a bare "torch" requirement takes.
    "${PIP[@]}" "torch==2.13.0" 2>/dev/null || echo "[eventtensor] no CPU torch 2.13.0; taking torch from PyPI"
  fi
  "${PIP[@]}" -e "$ROOT[test]"
  touch "$STAMP"
fi
PY="$VENV/bin/python"
