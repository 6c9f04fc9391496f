#!/usr/bin/env bash
# The owed one-GPU measurements of issues 22 and 23 in one command (about 9 minutes on an H100):
#
#   OUT=some/folder bash validation/gpu_owed.sh
#
# Each stage has its own time limit and writes its own files into $OUT as it measures (gpu_owed.py's CSVs,
# memory_phases.csv (the step's peak allocated / reserved bytes: foreach vs fused AdamW, gradients kept or set
# to None, plain, DDP and FSDP2 on one rank: gpu_memory_phases.py),
# idle_fsdp.csv (the same step plain, FSDP1 and FSDP2 on one rank: FSDP's host work; idle.csv, three plain SDPA
# runs, only with OWED_IDLE_PLAIN=1),
# fp8.toml and fp8_points.csv, one log per stage), so a lease cut short keeps what was measured.
# Commit the folder under validation/ with the hardware, versions and protocol (owed_env.txt, this script).
set -u
OUT=${OUT:?set OUT to the folder that receives the files}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PARASIM=(python3 -c 'import sys; from simulator.cli import main; sys.argv[0] = "parasim"; main()')
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv >"$OUT/smi.txt" 2>&1

stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "stage $name: rc $? in $((SECONDS - t0)) s"
  grep -v "^USDT\|profiler_st" "$OUT/$name.log" | tail -n 60
}

owed() { stage "$1" "$2" python3 validation/gpu_owed.py --out "$OUT" --stages "$1" --budget-s "$3"; }
# In priority order, sized to one 10-minute call with the machine's start inside a 15-minute lease (about 530 s):
owed launch 45 20
stage memory 75 python3 validation/gpu_memory_phases.py --out "$OUT/memory_phases.csv"
owed layers 100 70
owed sdpa 75 55
stage fp8 60 "${PARASIM[@]}" calibrate gemm-fp8 --base dgx-h100 --out "$OUT/fp8.toml" --residuals "$OUT/fp8_points.csv"
stage idle_fsdp 70 python3 validation/idle_gaps.py --out "$OUT/idle_fsdp.csv" --wrap none,fsdp1,fsdp2 \
  --config L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa
owed decode 35 20
owed contention 35 20
stage sustained 30 python3 validation/gpu_owed.py --out "$OUT" --stages sustained --sustain-s 15
[ -n "${OWED_IDLE_PLAIN:-}" ] && stage idle 120 python3 validation/idle_gaps.py --out "$OUT/idle.csv"
exit 0
