#!/usr/bin/env bash
# Run on the GPU machine from the repository root: GPU tests, then the megakernel benchmark.
# Logs and JSON go to $OUT (default: ./out).
set -uo pipefail
OUT="${OUT:-out}"
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1 EVENTTENSOR_CACHE="${EVENTTENSOR_CACHE:-/tmp/et-cache}"
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, torch.version.cuda, 'cuda-bindings', cuda.bindings.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
python3 -c "from cuda.bindings import nvrtc; print('nvrtc', nvrtc.nvrtcVersion())" 2>&1 | tee -a "$OUT/gpu.txt"
python3 -m pytest -q -x tests/gpu -p no:cacheprovider --durations=8 2>&1 | tee "$OUT/gpu_tests.log"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool" | tee -a "$OUT/sanitizer.log"
    "$SAN" --tool "$tool" --report-api-errors no python3 scripts/sanitize_case.py 2>&1 | tail -8 | tee -a "$OUT/sanitizer.log"
  done
else
  echo "compute-sanitizer not found on this machine" | tee "$OUT/sanitizer.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 benchmarks/megakernel_bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
