"""Run torch's own ring attention (torch.distributed.tensor.experimental context_parallel's
`_templated_ring_attention` and its backward) on CPU as the last rank of a fake process group of `c` ranks, every
aten op recorded with the tensors it reads and writes (tests/test_elementwise_ops.py `Recorder`), and print the
bytes of the ops beside the attention kernels and the collectives as JSON.

    python tests/helpers/ring_merge_bytes.py C HEADS KV_HEADS SEQ HEAD_DIM

A subprocess: the fake process group is global state (tests/test_cp_merge.py runs it)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

from tests.test_elementwise_ops import Recorder  # noqa: E402

COMM = ("all_gather_into_tensor", "wait_tensor", "all_to_all_single", "_wrap_tensor_autograd", "randn_like")


def main() -> int:
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring

    c, h, hkv, n, d = (int(x) for x in sys.argv[1:6])
    dist.init_process_group("fake", store=FakeStore(), rank=c - 1, world_size=c)
    g = dist.group.WORLD
    q, k, v = (torch.randn(1, n, heads, d, dtype=torch.bfloat16).transpose(1, 2)  # torchtitan's views
               for heads in (h, hkv, hkv))
    def total(ops):
        return sum(r + w for name, r, w, _, excluded, _ in ops if not excluded and name not in COMM)

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    with Recorder() as fwd:
        out, lse, *_ = ring._templated_ring_attention(g, 2, op, q, k, v, is_causal=True)
    bop = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    grad = torch.randn_like(out)
    with Recorder() as bwd:
        ring._templated_ring_attention_backward(g, 2, bop, grad, "grad_out", q, k, v, out, lse, True, dropout_p=0.0)
    print(json.dumps({"forward": total(fwd.ops), "backward": total(bwd.ops), "q_elems": q.numel(),
                      "kv_elems": k.numel(), "lse_elems": h * n,
                      "convert_to_f32": ring._cp_options.convert_to_f32}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
