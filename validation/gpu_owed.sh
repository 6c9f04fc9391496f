#!/usr/bin/env bash
# The owed one-GPU measurements of issues 22 and 23 in one command (about 10 minutes on an H100; the stages run in
# priority order, so a 10-minute call that ends early loses the last, twice-measured ones):
# (more than 8 files: run it with OUT=/tmp/x and tar the folder into the tool's $OUT, as validation/h100_owed/ was)
#
#   OUT=some/folder bash validation/gpu_owed.sh
#
# Each stage has its own time limit and writes its own files into $OUT as it measures, so a lease cut short keeps
# what was measured: the allocator's history at the FSDP2 / DDP / plain peaks by allocating code
# (gpu_memory_phases.py --snapshot), GEMM and memory-bound kernels one call at a time, queued and by CUPTI
# kernel time (gpu_gemm_queued.py), harness steps at the power limit unprofiled and profiled with the SM clock
# and power sampled while they run (gpu_power_step.py), every kernel of profiled harness steps with the ops that
# launched it (kernel_sum_check.py: the strided-operand table's check on runs it was not fitted to) and the foreach
# AdamW's kernels (profile_step.py --optimizer-impl foreach: the foreach optimizer, -12 % on the shipped preset),
# the speed of every visible GPU by UUID (gpu_spread.py: the slowest-of-n
# question of docs/weak-scaling.md), gpu_owed.py's CSVs (sdpa with its batch x heads grid first, layers, launch,
# decode, contention), FSDP's host work (idle_gaps.py), one log per stage.
# Commit the folder under validation/ with the hardware, versions and protocol (owed_env.txt, this script).
# On an H200 (the other kind lent) memory_queued.csv is the first measurement of its memory-bound kernels: the
# check of the H200 presets' tables, which come from a published benchmark (validation/published_memory_tables.py).
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
# The first four stages and most later ones ran on the lent H200 of session 26 (validation/h200/, gpu_h200.sh);
# on an H100 they are repeats on the GPU the tables came from.
# In priority order: first what sessions 16 and 17 left open (the GEMM's slowdown at the power limit by its share
# of a step, and the weight-gradient GEMM added into fp32 gradients: docs/accuracy.md, DGXC_H100; the batched
# attention GEMMs and linears off the 16-byte alignment: docs/accuracy.md, BLOOM_PREQUEL; attention dropout inside
# the fused kernels: DGXC_H100_GPT3), then what the second
# lease left open (validation/h100_owed2/README.md), then the earlier
# stages again on the new machine. Sized to one 10-minute call (about 815 s of limits: the last stages may be cut; the MoE expert block, the largest open question, first).
stage moe_layer 150 python3 validation/gpu_moe_layer.py --out "$OUT" --budget-s 120  # the MoE rows' GPU-side gap
# Megatron-Core's MoE block issued by a GPU host (the check of the megatron stack's moe_host_us_per_kernel, measured
# on CPU: validation/moe_host_cpu.py); runs where MEGATRON names a Megatron-LM tree carried to the device (e.g.
# `git archive core_v0.15.0 megatron/core` of NVIDIA/Megatron-LM unpacked into an ignored folder, given to `carry`)
if [ -n "${MEGATRON:-}" ]; then
  stage moe_host 90 python3 validation/moe_host_cpu.py --device cuda --ep 1 --reps 30 --megatron "$MEGATRON" \
    --out "$OUT/moe_host_gpu.csv"
fi
stage power_mix 150 python3 validation/gpu_power_step.py --out "$OUT/power_mix.csv" --sustain-s 3 --idle-s 1 \
  --workloads mix,accumulate
stage unaligned 60 python3 validation/gpu_unaligned_gemm.py --out "$OUT/unaligned_gemm.csv"  # cost/alignment.py
stage dropout 40 python3 validation/gpu_attention_dropout.py --out "$OUT/attention_dropout.csv"  # attention.py note
stage kernels 60 python3 validation/kernel_sum_check.py --out "$OUT/kernel_sum.csv" --steps 3 \
  --config L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa --config L4-h6144-a48-kv8-f16384-s4096-b1-none-bf16-sdpa
stage foreach 45 python3 validation/profile_step.py --grid gpu --pick 9,16,21 --optimizer-impl foreach \
  --out "$OUT/kernel_breakdown_foreach.csv"
stage power 60 python3 validation/gpu_power_step.py --out "$OUT/power_step.csv" --sustain-s 5 --idle-s 2
stage snapshot 55 python3 validation/gpu_memory_phases.py --config L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa \
  --out "$OUT/memory_phases_h4096.csv" --snapshot "$OUT/peak_owners_h4096.csv"
stage gemm_kernels 60 python3 validation/gpu_gemm_queued.py --out "$OUT/gemm_queued.csv"
stage spread 25 python3 validation/gpu_spread.py --out "$OUT/spread.csv" --seconds 10  # this GPU's speed, by UUID
stage memory_kernels 40 python3 validation/gpu_gemm_queued.py --memory --out "$OUT/memory_queued.csv"
owed sdpa 50 40
owed layers 50 40
owed launch 25 12
stage idle_fsdp 50 python3 validation/idle_gaps.py --out "$OUT/idle_fsdp.csv" --wrap none,fsdp1,fsdp2 \
  --config L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa
owed decode 25 12
owed contention 20 10
exit 0
