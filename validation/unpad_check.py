"""flash-attn's unpadding, predicted against the H100 measurement: parasim's per-layer cost of
Stack.attention_padding = "unpad" (cost/padding_ops.py copies + cost/launch.py `padding_sync_s`) for the MPT
blocks validation/gpu_unpad.py timed (validation/h100_cp_unpad/unpad2.csv: 4 blocks forward + backward, one
micro-batch, attention called directly and through bert_padding, alternating twice).

    python validation/unpad_check.py            # the table (markdown)

measured: (unpad - direct) / layers per run pair, the two pairs' mean (direct: the faster of its two runs);
copies: the same for the no-sync variant (the copies alone); predicted: the estimate's step with
attention_padding "unpad" minus "none" for the same model (the llm-foundry H100 source's rules, 4 layers, one GPU,
one micro-batch, no recompute) over its layers, and its host-sync part (`padding_sync_s`). Nothing here is fitted
to these runs: the kernel count comes from the profiler, h from the fsdp stack, the copy times from the dgx-h100
memory tables.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MEASURED = (ROOT / "validation" / "h100_cp_unpad" / "unpad2.csv",  # blocks as they are
            ROOT / "validation" / "h100_cp_unpad" / "unpad_ckpt.csv")  # under activation checkpointing


def measured(paths=MEASURED):
    """{(model, d_model, heads, seq, micro_batch, checkpoint): (overhead s/layer, copies-only s/layer)} from the
    runs."""
    import pandas as pd

    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    df["checkpoint"] = df["checkpoint"].fillna(False).astype(bool) if "checkpoint" in df else False
    out = {}
    for key, g in df.groupby(["model", "d_model", "heads", "seq", "micro_batch", "checkpoint"], sort=False):
        direct = g[g.variant == "direct"].step_s.min()
        layers = int(g.layers.iloc[0])
        out[key] = ((g[g.variant == "unpad"].step_s.mean() - direct) / layers,
                    (g[g.variant == "nosync"].step_s.mean() - direct) / layers)
    return out


def predicted(model: str, d: int, heads: int, seq: int, mb: int, checkpoint: bool = False,
              layers: int = 4) -> tuple[float, float]:
    """(per-layer step difference unpad - none, its host-sync part per forward) of parasim for one such block
    stack; `checkpoint`: full recompute (the forward, with its unpadding, runs again in the backward)."""
    from simulator.cost.launch import padding_sync_s
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.validate.mapping import map_run

    row = dict(run_id="unpad_check", source_id="LLMFOUNDRY_H100", model=model, layers=layers, hidden=d, heads=heads,
               ffn_hidden=4 * d, vocab=50368, seq_len=seq, global_batch_seqs=mb, micro_batch=mb, n_gpus=1, tp=1,
               pp=1, dp=1, cp=1, zero_fsdp="none", recompute="full" if checkpoint else "none", precision="bf16",
               gpu_type="H100",
               notes="attn_impl=flash")
    mr = map_run(row)
    if mr.skip_reason:
        raise ValueError(mr.skip_reason)
    hw = load_hardware(mr.hardware_name)
    on = estimate(mr.model, mr.training, mr.layout, hw).step_s
    off_training = replace(mr.training, stack=replace(mr.training.stack, attention_padding="none"))
    off = estimate(mr.model, off_training, mr.layout, hw).step_s
    return (on - off) / layers, padding_sync_s(mr.training.stack, True)


def table() -> list[dict]:
    rows = []
    for (model, d, heads, seq, mb, ckpt), (meas, copies) in measured().items():
        pred, sync = predicted(model, d, heads, seq, mb, ckpt)
        rows.append(dict(model=model, d_model=d, seq=seq, micro_batch=mb, checkpoint=ckpt, measured_ms=meas * 1e3,
                         copies_ms=copies * 1e3, predicted_ms=pred * 1e3, predicted_sync_ms=sync * 1e3,
                         ratio=pred / meas))
    return rows


def main() -> int:
    rows = table()
    print("| model | d_model | seq | micro-batch | checkpointed | measured ms/layer | of it copies (no-sync run) "
          "| predicted ms/layer | host syncs per forward | predicted / measured |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['d_model']} | {r['seq']} | {r['micro_batch']} | {'yes' if r['checkpoint'] else 'no'} "
              f"| {r['measured_ms']:.2f} | "
              f"{r['copies_ms']:.2f} | {r['predicted_ms']:.2f} | {r['predicted_sync_ms']:.2f} | {r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
