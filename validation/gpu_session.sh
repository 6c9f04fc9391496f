#!/usr/bin/env bash
# The GPU protocol of validation/README.md in one command, for a lent one-GPU machine.
#
#   OUT=some/folder bash validation/gpu_session.sh [BASE_PRESET]      # BASE_PRESET default dgx-h100
#
# Writes into $OUT: env.txt (GPU, driver, torch/CUDA versions), calibrated profile (lent.toml) and
# its measured points (calib_points.csv), the training-step measurements (train_steps.csv), the
# error tables against the calibrated profile and against the uncalibrated base preset, and one log
# per stage. Each stage has its own time limit, so a slow stage still leaves the others' files.
set -u
OUT=${OUT:?set OUT to the folder that receives the files}
BASE=${1:-dgx-h100}
GRID=${GRID:-gpu}  # GRID=cpu runs the same stages with tiny shapes (a dry run of this script)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PARASIM=(python3 -c 'import sys; from simulator.cli import main; sys.argv[0] = "parasim"; main()')

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  git rev-parse HEAD 2>/dev/null || echo "commit: not a git checkout"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  python3 - <<'EOF'
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| cudnn", torch.backends.cudnn.version())
p = torch.cuda.get_device_properties(0)
print("device", p.name, "| SMs", p.multi_processor_count, "| memory bytes", p.total_memory)
EOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "stage $name: rc $? in $((SECONDS - t0)) s"
  tail -n 40 "$OUT/$name.log"
}

stage calibrate 300 "${PARASIM[@]}" calibrate all --base "$BASE" --name lent-gpu --out "$OUT/lent.toml" \
  --residuals "$OUT/calib_points.csv" --grid "$GRID"
stage train_steps 300 python3 validation/train_step.py --grid "$GRID" --warmup 3 --steps 10 --out "$OUT/train_steps.csv"
if [ -f "$OUT/lent.toml" ]; then
  stage compare_calibrated 120 python3 validation/compare_train_steps.py "$OUT/train_steps.csv" --hardware "$OUT/lent.toml"
fi
stage compare_base 120 python3 validation/compare_train_steps.py "$OUT/train_steps.csv" --hardware "$BASE"
