"""Transcribe NVIDIA's published cuDNN attention training benchmarks into validation/data/cudnn_sdpa.csv.

    python validation/cudnn_sdpa_extract.py CLONE          # print the CSV
    python validation/cudnn_sdpa_extract.py CLONE --write  # write validation/data/cudnn_sdpa.csv

CLONE is a git clone of NVIDIA/cudnn-frontend with its history. Its `benchmark/sdpa_benchmark_training`
(benchmark_bf16_sdpa.py, later benchmark_single_sdpa.py) times one scaled-dot-product-attention forward and
backward per shape on one GPU and publishes the results with each release: first as
`artifacts/sdpa_bf16_benchmark_results_NVIDIA_<GPU>.csv` (batch 1, 128 query heads, 8 KV heads, head dim 128,
causal; backends named `pyt_cudnn` (torch SDPA's cuDNN backend) or `cudnn_fe` (the cuDNN frontend called
directly)), from cuDNN 9.18 as `results/<gpu>_9xx_only_cudnn/llama3.1_*.csv` and `results/llama3.1/<gpu>/*.csv`
(Llama 3.1 405B's attention: 64 query heads, 8 KV heads, head dim 128; `top_left` is the causal mask), and
`results/gpt_oss/<gpu>/*.csv` (GPT-OSS's windowed layers: 128 heads, head dim 64, a causal window of 128 keys), and
`results/<gpu>_9xx_only_cudnn/dsv3_*.csv`, `results/dsv3/<gpu>/*.csv` (DeepSeek-V3's multi-head latent attention: 128
heads, head dim 192 for QKᵀ and 128 for A·V: `head_dim`, `head_dim_v`). Every row keeps the file it came from (commit
and path), the GPU and cuDNN version the release's sample log or CSV names, and the benchmark's own TFLOP/s, which
count 2·b·h·(d_qk + d_v) FLOPs per score computed forward (4·b·h·d with one head dim; s²/2 causal, the band
w·s − w(w − 1)/2 with a window of w keys) and 2·b·h·(3·d_qk + 2·d_v) backward, 2.5 times the forward with one head
dim (checked here against each row's forward time).

Only bf16 rows of the cuDNN backends and of torch's flash backend (`pyt_flash_attention`: FlashAttention-2), causal or
not, are kept, with the deterministic backward off; where a file times a shape only with it on (the H200's and the
cuDNN 9.18-9.19 latent-attention files), that row, marked `deterministic`. Nothing is edited.
"""
from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "cudnn_sdpa.csv"
BENCH = "benchmark/sdpa_benchmark_training/"
# (commit, path under BENCH, gpu, cuDNN backend version): the version from the release's sample log of that GPU
# (artifacts/sample_<gpu>_bf16_run.txt, `torch.backends.cudnn.version()` / `cudnn.backend_version()`) or the
# CSV's own cudnn_backend_version column (from cuDNN 9.18's result files)
FILES = (
    ("cb560b9", "artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv", "B200", 91002),
    ("bb37575", "artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv", "B200", 91300),
    ("bb37575", "artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv", "GB300", 91300),
    ("d48a60e", "artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv", "GB200", 91700),
    ("d48a60e", "artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv", "GB300", 91700),
    ("9072c4e", "results/gb200_918_only_cudnn/llama3.1_20260126_110503.csv", "GB200", None),
    ("9072c4e", "results/gb300_918_only_cudnn/llama3.1_20260126_110426.csv", "GB300", None),
    ("afa9f7c", "results/gb200_919_only_cudnn/llama3.1_20260226_174648.csv", "GB200", None),
    ("afa9f7c", "results/gb300_919_only_cudnn/llama3.1_20260226_185510.csv", "GB300", None),
    ("afa9f7c", "results/h200_919_only_cudnn/llama3.1_20260227_034703.csv", "H200", None),
    ("60e572b", "results/llama3.1/gb200/llama3.1_20260424_100750.csv", "GB200", None),
    ("60e572b", "results/llama3.1/gb300/llama3.1_20260424_100757.csv", "GB300", None),
    ("60e572b", "results/gpt_oss/gb200/gpt_oss_20260424_100011.csv", "GB200", None),
    ("60e572b", "results/gpt_oss/gb300/gpt_oss_20260424_100022.csv", "GB300", None),
    # DeepSeek-V3's multi-head latent attention: 128 heads, head dim 192 for QKᵀ and 128 for A·V
    ("9072c4e", "results/gb200_918_only_cudnn/dsv3_20260126_110621.csv", "GB200", None),
    ("9072c4e", "results/gb300_918_only_cudnn/dsv3_20260126_110622.csv", "GB300", None),
    ("afa9f7c", "results/gb200_919_only_cudnn/dsv3_20260226_174854.csv", "GB200", None),
    ("afa9f7c", "results/gb300_919_only_cudnn/dsv3_20260226_185831.csv", "GB300", None),
    ("afa9f7c", "results/h200_919_only_cudnn/dsv3_20260227_034744.csv", "H200", None),
    ("60e572b", "results/dsv3/gb200/dsv3_20260424_101009.csv", "GB200", None),
    ("60e572b", "results/dsv3/gb300/dsv3_20260424_101002.csv", "GB300", None),
)
# cuDNN (torch's SDPA path, the frontend called directly) and torch's flash backend (FlashAttention-2)
BACKENDS = ("pyt_cudnn", "cudnn_fe", "cudnn", "pyt_flash_attention")
COLUMNS = ("gpu", "cudnn_version", "backend", "batch", "heads", "kv_heads", "seq_len", "head_dim", "head_dim_v",
           "causal", "window", "deterministic", "fwd_ms", "bwd_ms", "fwd_tflops", "bwd_tflops", "commit", "date",
           "path")


def _show(clone: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(clone), "show", f"{commit}:{BENCH}{path}"], check=True,
                          capture_output=True, text=True).stdout


def _date(clone: Path, commit: str) -> str:
    return subprocess.run(["git", "-C", str(clone), "log", "-1", "--format=%ad", "--date=short", commit],
                          check=True, capture_output=True, text=True).stdout.strip()


def _rows(text: str) -> list[dict]:
    """The file's rows in one shape: the old artifacts (fwd and bwd on one row, is_causal) and the newer results
    (one pass per row or both, attn_mask top_left / no_mask) alike."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        if "is_causal" in r:  # artifacts: batch_size,...,head_dim,is_causal,backend,forward_time,backward_time,...
            out.append(dict(backend=r["backend"], dtype="bfloat16", det="False", batch=r["batch_size"],
                            heads=r["num_q_heads"], kv_heads=r["num_kv_heads"], seq_len=r["q_seqlen"],
                            head_dim=r["head_dim"], head_dim_v=r["head_dim"], causal=r["is_causal"] == "True",
                            fwd_ms=r["forward_time"],
                            bwd_ms=r["backward_time"], fwd_tflops=r["fwd_tflops_per_sec"],
                            bwd_tflops=r["bwd_tflops_per_sec"], version=None, window=0))
            continue
        if r.get("success") == "False":  # a shape the benchmark could not run (out of memory, unsupported)
            continue
        base = dict(backend=r["backend"], dtype=r["data_type"], det=r["deterministic_bwd"], batch=r["batch_size"],
                    heads=r["num_q_heads"], kv_heads=r["num_kv_heads"], seq_len=r["q_seqlen"],
                    head_dim=r["head_dim_qk"], head_dim_v=r["head_dim_vo"], causal=r["attn_mask"] == "top_left",
                    version=int(float(r["cudnn_backend_version"])), window=int(r.get("sliding_window_size") or 0))
        if r["profile_pass"] == "both":
            out.append(base | dict(fwd_ms=r["fwd_time_ms"], bwd_ms=r["bwd_time_ms"], fwd_tflops=r["fwd_tflops"],
                                   bwd_tflops=r["bwd_tflops"]))
        else:
            p = r["profile_pass"]
            out.append(base | {f"{p}_ms": r["time_ms"], f"{p}_tflops": r["tflops"]})
    return out


def flops(batch, heads, seq, head_dim, causal: bool, window: int = 0, head_dim_v=None) -> float:
    """The benchmark's forward FLOPs: 2·b·h·(d_qk + d_v) (4·b·h·d when the two head dims are equal) times the
    scores computed, s²/2 causal, s² not (microbench.attention_forward_flops), and with a causal window of w keys
    the band w·s − w(w − 1)/2 (cost/window.py band_entries)."""
    sys.path.insert(0, str(OUT.parent.parent.parent))
    from simulator.calibrate.microbench import attention_forward_flops
    from simulator.cost.window import band_entries

    d = (float(head_dim) + float(head_dim if head_dim_v is None else head_dim_v)) / 2.0  # the mean of the two dims
    if window:
        return 4.0 * batch * heads * d * float(band_entries(seq, window))
    return float(attention_forward_flops(batch, heads, seq, d, causal=causal))


def table(clone: Path) -> list[dict]:
    """One row per (file, shape, mask): forward and backward joined; the deterministic backward's row only where the
    file has no other for the shape (the H200 and cuDNN 9.18-9.19 latent-attention files time only that)."""
    rows = []
    for commit, path, gpu, version in FILES:
        date = _date(clone, commit)
        merged: dict[tuple, dict] = {}
        file_rows = [r for r in _rows(_show(clone, commit, path))
                     if r["backend"] in BACKENDS and r["dtype"] == "bfloat16"]
        shape = lambda r: (r["backend"], r["batch"], r["heads"], r["kv_heads"], r["seq_len"], r["head_dim"],  # noqa
                           r["head_dim_v"], r["causal"], r["window"])
        fast = {shape(r) for r in file_rows if r["det"] == "False"}
        for r in file_rows:
            if r["det"] != "False" and shape(r) in fast:
                continue
            m = merged.setdefault(shape(r), dict(gpu=gpu, cudnn_version=version or r["version"], backend=r["backend"],
                                                 batch=int(r["batch"]), heads=int(r["heads"]),
                                                 kv_heads=int(r["kv_heads"]), seq_len=int(r["seq_len"]),
                                                 head_dim=int(r["head_dim"]), head_dim_v=int(r["head_dim_v"]),
                                                 causal=r["causal"], window=r["window"],
                                                 deterministic=r["det"] != "False", commit=commit,
                                                 date=date, path=BENCH + path))
            for k in ("fwd_ms", "bwd_ms", "fwd_tflops", "bwd_tflops"):
                if r.get(k) not in (None, ""):
                    m[k] = float(r[k])
        rows.extend(m for m in merged.values() if m.get("fwd_tflops", 0) > 0)
    for m in rows:  # the benchmark's FLOP convention, checked against its own time
        fwd = flops(m["batch"], m["heads"], m["seq_len"], m["head_dim"], m["causal"], m["window"], m["head_dim_v"])
        assert abs(fwd / (m["fwd_ms"] * 1e-3) / 1e12 / m["fwd_tflops"] - 1) < 0.02, m
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clone", type=Path, help="a git clone of NVIDIA/cudnn-frontend with its history")
    ap.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = ap.parse_args(argv)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in table(args.clone):
        w.writerow({k: r.get(k, "") for k in COLUMNS})
    if args.write:
        OUT.write_text(buf.getvalue())
        print(f"wrote {OUT}")
    else:
        sys.stdout.write(buf.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
