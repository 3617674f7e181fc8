#!/usr/bin/env bash
# Nsight Compute on one warm decode step of the megakernel (run on the GPU machine from the
# repository root): warp states, scheduler and instruction statistics and the per-instruction
# stall samples of the third `et_` kernel launch of decode_tiles_bench.py (TILES: its --tiles
# value, default the defaults; B: the batch, default 1). Writes to $OUT (default ./out):
# ncu_B$B.ncu-rep, ncu_B$B.txt (the details page), ncu_B$B_source.csv.gz (the SASS with
# its samples) and ncu_B${B}_stalls.md (the samples by stall reason, benchmarks/ncu_stalls.py).
set -uo pipefail
OUT="${OUT:-out}"
B="${B:-1}"
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1 EVENTTENSOR_CACHE="${EVENTTENSOR_CACHE:-/tmp/et-cache}"
rep="$OUT/ncu_B$B"
timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none -k regex:^et_ --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section InstructionStats \
  --section SourceCounters -f -o "$rep" \
  python3 benchmarks/decode_tiles_bench.py --batches "$B" --iters 3 --tiles="${TILES:-}" \
  --out "$OUT/ncu_bench" 2>&1 | tail -20
ncu --import "$rep.ncu-rep" --page details > "$rep.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "${rep}_source.csv.gz"
python3 benchmarks/ncu_stalls.py "${rep}_source.csv.gz" > "${rep}_stalls.md"
ls -la "$OUT"
