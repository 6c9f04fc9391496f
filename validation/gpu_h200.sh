#!/usr/bin/env bash
# The dgx-h200 preset's assumptions measured on a lent H200 SXM, in one command (about 9 minutes):
#
#   OUT=some/folder bash validation/gpu_h200.sh
#
# dgx-h200 holds the H100 SXM's measured GEMM, FP8 and attention tables ("the H200 SXM has the H100 SXM's compute
# die and 700 W limit") and HBM3e's 4.8 TB/s for its memory-bound kernels. On an H200 this measures, in priority
# order: the harness training steps of the H100 grid (train_step.py, fused AdamW, persistent gradients: the
# end-to-end check of the preset on a GPU nothing was fitted to), the calibration's GEMM grid bf16 and FP8 one call
# at a time and queued (gpu_gemm_queued.py), the memory-bound kernels (--memory), the 8192^3 GEMM and two harness
# steps cold / back to back at the power limit / hot with clock and power sampled (gpu_power_step.py), SDPA backends
# (gpu_owed.py sdpa), the GEMMs off the 16-byte alignment (gpu_unaligned_gemm.py), attention dropout
# (gpu_attention_dropout.py), then the held-out harness grid. Each stage has its own time limit and writes its rows
# as it measures; after every stage the folder is packed into $OUT/h200.tar.gz (the device tool returns at most 8
# files), so a call cut short keeps what was measured. Commit the unpacked folder under validation/ with the
# hardware, versions and protocol (env.txt, this script).
set -u
OUT=${OUT:?set OUT to the folder that receives the files}
WORK=${WORK:-/tmp/h200}
GRID=${GRID:-gpu}  # GRID=cpu with TINY=--tiny: the same stages with tiny shapes (a dry run of this script)
TINY=${TINY:-}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  git rev-parse HEAD 2>/dev/null || echo "commit: not a git checkout"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  uname -r
  python3 - <<'EOF'
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| cudnn", torch.backends.cudnn.version())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "| SMs", p.multi_processor_count, "| memory bytes", p.total_memory,
          "| L2 bytes", getattr(p, "L2_cache_size", "?"))
EOF
} >"$WORK/env.txt" 2>&1
cat "$WORK/env.txt"

pack() { tar -C "$WORK" -czf "$OUT/h200.tar.gz.part" . && mv "$OUT/h200.tar.gz.part" "$OUT/h200.tar.gz"; }
stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$WORK/$name.log" 2>&1
  echo "stage $name: rc $? in $((SECONDS - t0)) s"
  grep -v "^USDT\|profiler_st\|_warn_once\|UserWarning" "$WORK/$name.log" | tail -n 30
  pack
}
pack
stage train_steps 170 python3 validation/train_step.py --grid "$GRID" --warmup 3 --steps 10 \
  --out "$WORK/fused_persistent_gpu.csv"
stage gemm_kernels 70 python3 validation/gpu_gemm_queued.py $TINY --out "$WORK/gemm_queued.csv"
stage memory_kernels 45 python3 validation/gpu_gemm_queued.py $TINY --memory --out "$WORK/memory_queued.csv"
stage power 60 python3 validation/gpu_power_step.py $TINY --out "$WORK/power_step.csv" --sustain-s 4 --idle-s 1
stage sdpa 45 python3 validation/gpu_owed.py $TINY --out "$WORK" --stages sdpa --budget-s 35
stage unaligned 50 python3 validation/gpu_unaligned_gemm.py $TINY --out "$WORK/unaligned_gemm.csv"
stage dropout 35 python3 validation/gpu_attention_dropout.py $TINY --out "$WORK/attention_dropout.csv"
HOLD=gpu-holdout; [ "$GRID" = cpu ] && HOLD=cpu
stage holdout 70 python3 validation/train_step.py --grid "$HOLD" --warmup 3 --steps 10 \
  --out "$WORK/fused_persistent_gpu-holdout.csv"
exit 0
