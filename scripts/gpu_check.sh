#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the GPU tests, compute-sanitizer, the
# megakernel benchmark and the decode benchmark. STEPS picks some of them (default: all of
# "tests sanitizer bench decode"; "tests" runs tests/gpu, TESTS narrows it, e.g.
# TESTS=tests/gpu/test_decode.py, and TESTS_K selects tests by a pytest -k expression;
# "tiles" runs benchmarks/decode_tiles_bench.py with TILES_ARGS, "trace"
# benchmarks/decode_trace_bench.py with TRACE_ARGS ("tiles_base" and "trace_base" the same
# with the script and package of the tree at BASE_TREE, e.g. `git archive REV src benchmarks
# | tar -x -C base_tree`, BASE_COMMIT naming REV, for a side-by-side baseline:
# decode_tiles_base.*, decode_trace_base.*; tiles_base takes TILES_BASE_ARGS if set; a
# benchmark script puts its own tree's src first on the path, so the base tree needs its
# own), "compile"
# benchmarks/compile_bench.py with COMPILE_ARGS, "linear" benchmarks/linear_bench.py with
# LINEAR_ARGS, "attention" benchmarks/attention_bench.py with ATTENTION_ARGS). The
# steps' logs, the benchmarks' JSON, markdown and pictures and the gzipped traces go to $OUT
# (default ./out); with TGZ=1 also everything, logs included, as $OUT/gpu_check.tgz (the
# GPU machine returns few files: copy that archive alone to its $OUT). Set ET_COMMIT to the
# commit under test: the benchmarks' headers otherwise name what `git rev-parse` says on the
# GPU machine, whose checkout may lag.
set -uo pipefail
OUT="${OUT:-out}"
STEPS="${STEPS:-tests sanitizer bench decode}"
FAIL=0  # 1 once a step fails or runs past its time bound: the exit status
mkdir -p "$OUT"
RUN="$(mktemp -d)"
export PYTHONPATH=src PYTHONUNBUFFERED=1 EVENTTENSOR_CACHE="${EVENTTENSOR_CACHE:-/tmp/et-cache}"
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee "$RUN/gpu.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, torch.version.cuda, 'cuda-bindings', cuda.bindings.__version__)" 2>&1 | tee -a "$RUN/gpu.txt"
python3 -c "from cuda.bindings import nvrtc; print('nvrtc', nvrtc.nvrtcVersion())" 2>&1 | tee -a "$RUN/gpu.txt"
# (each step bounded, so that the archive is written within the GPU machine's command limit)
if has tests; then
  timeout "${TEST_TIMEOUT:-480}" python3 -m pytest -q -x ${TESTS:-tests/gpu} ${TESTS_K:+-k "$TESTS_K"} \
    -p no:cacheprovider --durations=8 2>&1 | tee "$RUN/gpu_tests.log" || FAIL=1
fi
if has sanitizer; then
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
fi
if has bench; then
  timeout "${BENCH_TIMEOUT:-480}" python3 benchmarks/megakernel_bench.py --out "$RUN" 2>&1 \
    | tee "$RUN/bench.log" || FAIL=1
fi
if has compile; then
  timeout "${COMPILE_TIMEOUT:-120}" python3 benchmarks/compile_bench.py ${COMPILE_ARGS:-} \
    --out "$RUN" 2>&1 \
    | tee "$RUN/compile_bench.log" || FAIL=1
fi
if has tiles; then
  timeout "${TILES_TIMEOUT:-480}" python3 benchmarks/decode_tiles_bench.py ${TILES_ARGS:-} \
    --out "$RUN" 2>&1 | tee "$RUN/decode_tiles.log" || FAIL=1
fi
if has linear; then
  timeout "${LINEAR_TIMEOUT:-300}" python3 benchmarks/linear_bench.py ${LINEAR_ARGS:-} \
    --out "$RUN" 2>&1 | tee "$RUN/linear_bench.log" || FAIL=1
fi
if has attention; then
  timeout "${ATTENTION_TIMEOUT:-300}" python3 benchmarks/attention_bench.py ${ATTENTION_ARGS:-} \
    --out "$RUN" 2>&1 | tee "$RUN/attention_bench.log" || FAIL=1
fi
if has trace; then
  timeout "${TRACE_TIMEOUT:-300}" python3 benchmarks/decode_trace_bench.py ${TRACE_ARGS:-} \
    --out "$RUN" 2>&1 | tee "$RUN/decode_trace.log" || FAIL=1
fi
# the same benchmark from another tree (BASE_TREE: its src, benchmarks): NAME_base.{log,json,md}
base_bench() {  # NAME SECONDS ARGS...
  local name="$1" secs="$2"
  shift 2
  mkdir -p "$RUN/base"
  BASE="${BASE_TREE:?${name}_base needs BASE_TREE}"
  PYTHONPATH="$BASE/src" ET_COMMIT="${BASE_COMMIT:-base tree}" timeout "$secs" \
    python3 "$BASE/benchmarks/${name}_bench.py" "$@" --out "$RUN/base" 2>&1 \
    | tee "$RUN/${name}_base.log" || FAIL=1
  for f in "$RUN/base/$name".{json,md}; do
    [ -f "$f" ] && cp "$f" "$RUN/$(basename "${f%.*}")_base.${f##*.}"
  done
}
if has tiles_base; then
  base_bench decode_tiles "${TILES_TIMEOUT:-480}" ${TILES_BASE_ARGS:-${TILES_ARGS:-}}
fi
if has trace_base; then
  base_bench decode_trace "${TRACE_TIMEOUT:-300}" ${TRACE_ARGS:-}
fi
if has decode; then
  timeout "${DECODE_TIMEOUT:-480}" python3 benchmarks/decode_bench.py ${DECODE_ARGS:---quick} \
    --out "$RUN" 2>&1 | tee "$RUN/decode_bench.log" || FAIL=1
fi
# the traces compressed; the archive only with TGZ=1 (the device returns few files)
for f in "$RUN"/decode_trace_B*.json; do [ -f "$f" ] && gzip -f "$f"; done
[ "${TGZ:-0}" = 1 ] && tar czf "$OUT/gpu_check.tgz" -C "$RUN" .
for f in "$RUN"/*.log "$RUN"/*.json "$RUN"/*.md "$RUN"/*.png "$RUN"/*.json.gz; do
  if [ -f "$f" ]; then cp "$f" "$OUT/"; fi
done
exit "$FAIL"
