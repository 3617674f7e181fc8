#!/usr/bin/env bash
# Run on the GPU machine from the repository root: GPU tests, compute-sanitizer, then the
# megakernel benchmark. Everything goes to $OUT/gpu_check.tgz (default OUT: ./out); the test
# log, the sanitizer log and the benchmark's JSON and markdown also lie in $OUT itself.
set -uo pipefail
OUT="${OUT:-out}"
mkdir -p "$OUT"
RUN="$(mktemp -d)"
export PYTHONPATH=src PYTHONUNBUFFERED=1 EVENTTENSOR_CACHE="${EVENTTENSOR_CACHE:-/tmp/et-cache}"
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee "$RUN/gpu.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, torch.version.cuda, 'cuda-bindings', cuda.bindings.__version__)" 2>&1 | tee -a "$RUN/gpu.txt"
python3 -c "from cuda.bindings import nvrtc; print('nvrtc', nvrtc.nvrtcVersion())" 2>&1 | tee -a "$RUN/gpu.txt"
# (each step bounded, so that the archive is written within the GPU machine's command limit)
timeout "${TEST_TIMEOUT:-480}" python3 -m pytest -q -x tests/gpu -p no:cacheprovider \
  --durations=8 2>&1 | tee "$RUN/gpu_tests.log"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool" | tee -a "$RUN/sanitizer.log"
    timeout 120 "$SAN" --tool "$tool" --report-api-errors no python3 scripts/sanitize_case.py 2>&1 \
      | tail -12 | tee -a "$RUN/sanitizer.log"
  done
else
  echo "compute-sanitizer not found on this machine" | tee "$RUN/sanitizer.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout "${BENCH_TIMEOUT:-480}" python3 benchmarks/megakernel_bench.py --out "$RUN" 2>&1 \
    | tee "$RUN/bench.log"
fi
tar czf "$OUT/gpu_check.tgz" -C "$RUN" .
for f in gpu_tests.log sanitizer.log megakernel_bench.json megakernel_bench.md; do
  [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/"
done
