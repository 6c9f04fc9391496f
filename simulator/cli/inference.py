"""`parasim estimate --inference`: its flags, the setup they give, and its JSON, CSV and text forms
(the estimate command, cli/estimate.py, calls these; simulator/inference.py does the work)."""
from __future__ import annotations

import functools

import click

from ..errors import InputError
from .flagnames import flag_names

_FLAGS = {"prompt_tokens": "--prompt-tokens", "output_tokens": "--output-tokens", "batch": "--batch"}


def inference_options(fn):
    """Decorate the estimate command with --inference and its flags."""
    @click.option("--inference", is_flag=True, default=False,
                  help="add the inference estimate of one replica of the layout (prefill, decode, max batch; "
                       "docs/inference.md)")
    @click.option("--prompt-tokens", type=int, default=None, help="prompt tokens per sequence (default: --seq)")
    @click.option("--output-tokens", type=int, default=None, help="generated tokens per sequence (default 256)")
    @click.option("--batch", type=int, default=None,
                  help="sequences one replica (tp x pp GPUs) decodes together (default: --global-batch / dp)")
    @click.option("--eager-decode", is_flag=True, default=False,
                  help="decode without CUDA graphs: each layer takes at least the stack's kernel launches")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def inference_setup(scenario, inference: bool, *, prompt_tokens, output_tokens, batch, eager_decode):
    """The InferenceSetup of the flags (None without --inference; its flags alone are an error)."""
    given = {k: v for k, v in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens), ("batch", batch))
             if v is not None}
    if not inference:
        if given or eager_decode:
            flag = _FLAGS[next(iter(given))] if given else "--eager-decode"
            raise InputError(f"{flag} needs --inference")
        return None
    from ..inference import InferenceSetup

    if scenario.layout is None:
        raise InputError("the scenario has no [layout]; --inference estimates one layout")
    with flag_names({k: _FLAGS[k] for k in given}, relations={k: _FLAGS[k] for k in given}):
        return InferenceSetup.for_scenario(scenario.training, scenario.layout, eager_decode=eager_decode, **given)


def _estimate(scenario, setup):
    from ..inference import estimate_inference_scenario

    return estimate_inference_scenario(scenario, setup)


def inference_dict(scenario, setup) -> dict:
    """The JSON "inference" object as printed (integer bytes, rounding residues cleaned)."""
    from ..report.tables import tidy_dict

    d = _estimate(scenario, setup).to_dict()
    return tidy_dict(d, scale=d["request_s"])


def inference_columns(scenario, setup) -> dict:
    """The inference scalars as CSV columns named `inference_<key>`."""
    d = inference_dict(scenario, setup)
    return {f"inference_{k}": v for k, v in d.items() if not isinstance(v, (dict, list, tuple))}


def inference_table(scenario, setup) -> str:
    """The text form: a header naming the model, hardware and layout, then the breakdown."""
    from ..report.inference import inference_lines

    e = _estimate(scenario, setup)
    m = scenario.model
    header = (f"{m.name} ({m.total_params() / 1e9:.2f} B params) inference on {e.layout.num_gpus} x "
              f"{getattr(scenario.hardware, 'name', '')}: {e.layout.label}")
    from ..report.tables import tidy_dict

    d = e.to_dict()
    return "\n".join(inference_lines(tidy_dict(d, scale=d["request_s"]), header=header))
