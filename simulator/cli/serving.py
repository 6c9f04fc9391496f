"""`parasim serve-sweep`: rank every serving layout of N GPUs (sweep/serving.py)."""
from __future__ import annotations

import json

import click

from ..errors import InputError
from .common import scenario_from_options, scenario_options


def _ms(flag: str, v):
    """Milliseconds from the command line as seconds; InputError naming the flag unless finite and > 0."""
    if v is None:
        return None
    if not (v == v and 0 < v < float("inf")):
        raise InputError(f"{flag} must be a finite number of milliseconds > 0, got {v!r}")
    return v / 1e3


def _table(df, top: int) -> str:
    lines = [f"{'rank':>5} {'layout':<18} {'batch':>6} {'tokens/s/GPU':>13} {'TTFT ms':>9} {'TPOT ms':>8} "
             f"{'max batch':>9}  feasible"]
    num = lambda x, spec: f"{x:{spec}}" if x == x else "-"  # noqa: E731
    for r in df.head(top).itertuples():
        lines.append(f"{r.rank:>5} {r.label:<18} {r.batch:>6} {num(r.tokens_per_s_per_gpu, '>13,.0f')} "
                     f"{num(r.time_to_first_token_s * 1e3, '>9.1f')} {num(r.time_per_output_token_s * 1e3, '>8.2f')} "
                     f"{num(r.max_batch, '>9.0f')}  {'yes' if r.feasible else 'no: ' + str(r.reason)}")
    return "\n".join(lines)


@click.command("serve-sweep")
@scenario_options
@click.option("--prompt-tokens", type=int, default=None, help="prompt length (default: --seq)")
@click.option("--output-tokens", type=int, default=256, show_default=True, help="tokens generated per sequence")
@click.option("--max-batch", type=int, default=None, help="largest batch per replica to try (default: what fits)")
@click.option("--max-ttft-ms", type=float, default=None, help="latency limit: time to first token, ms")
@click.option("--max-tpot-ms", type=float, default=None, help="latency limit: time per output token, ms")
@click.option("--top", type=int, default=10, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
def serve_sweep(prompt_tokens, output_tokens, max_batch, max_ttft_ms, max_tpot_ms, top, fmt, **kwargs):
    """Rank every serving layout of --gpus GPUs (replicas of TP x PP GPUs) and batch per replica by output
    tokens/s per GPU, among those whose KV cache fits and that meet the latency limits (docs/inference.md).

    \b
    Examples:
      parasim serve-sweep --model llama3-70b --hardware dgx-h100 --gpus 8 --seq 4096 --global-batch 1
      parasim serve-sweep --model llama3-8b --hardware dgx-h100 --gpus 8 --seq 2048 --global-batch 1 --max-tpot-ms 20
    """
    from ..inference import InferenceSetup
    from ..sweep.serving import run_serving_sweep
    from .flagnames import flag_names

    sc = scenario_from_options(kwargs, require_layout=False)
    if top < 0:
        raise InputError(f"--top must be >= 0, got {top}")
    prompt_tokens = sc.training.seq_length if prompt_tokens is None else prompt_tokens
    flags = {"prompt_tokens": "--prompt-tokens", "output_tokens": "--output-tokens", "batch": "--max-batch"}
    with flag_names(flags, relations=flags):  # the rules of estimate --inference, named by these flags
        InferenceSetup(batch=1 if max_batch is None else max_batch, prompt_tokens=prompt_tokens,
                       output_tokens=output_tokens)
    df = run_serving_sweep(sc.model, sc.training, sc.hardware, sc.num_gpus,
                           prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                           max_batch=max_batch, max_ttft_s=_ms("--max-ttft-ms", max_ttft_ms),
                           max_tpot_s=_ms("--max-tpot-ms", max_tpot_ms))
    if fmt == "json":
        click.echo(json.dumps(json.loads(df.head(top).to_json(orient="records")), indent=2))
    elif fmt == "csv":
        click.echo(df.head(top).to_csv(index=False), nl=False)
    else:
        fits = int(df["feasible"].sum())
        click.echo(f"{sc.model.name} on {sc.num_gpus} x {sc.hardware.name}: {len(df)} serving layouts x batches, "
                   f"{fits} fit and meet the limits")
        click.echo(_table(df, top))


COMMANDS = [serve_sweep]
