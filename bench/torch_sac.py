"""What torchtitan's per-op selective activation checkpointing keeps of one Llama block,
counted on PyTorch's own op stream (not a unit test; needs torch, CPU is enough).

    python bench/torch_sac.py

torchtitan's `SelectiveAC` (torchtitan/distributed/activation_checkpoint.py @b5bcd76c6)
checkpoints each transformer block and, inside it, keeps (CheckpointPolicy.MUST_SAVE) the
outputs of compute-intensive ops (torch._functorch.partitioners.get_default_op_list():
mm, bmm, addmm, SDPA's flash/efficient kernels, _scaled_mm, ...), cuDNN attention and
reduce-scatters, except every second mm/linear counted from the block's start; everything else
is recomputed in the backward pass. What stays in memory between a block's forward and its
backward is then the block's input (the checkpoint's) and those outputs.

This script runs a torchtitan-shaped Llama block forward under a TorchDispatchMode, sees every
ATen op with its output, applies that rule and prints the bytes kept per token, in units of the
hidden size's bytes, next to `cost_models.memory.op_sac_layer_activation_bytes`.
On CPU, SDPA runs aten._scaled_dot_product_flash_attention_for_cpu, which the GPU's save set
does not name; it stands in for the cuDNN/flash kernel the GPU runs (kept: output and
log-sum-exp), as torchtitan keeps those. tests/golden/test_pytorch_measured.py pins the counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.memory import op_sac_layer_activation_bytes  # noqa: E402

aten = torch.ops.aten


class Block(nn.Module):
    """torchtitan's Llama 3 TransformerBlock shape (models/llama3/model.py): RMSNorm, separate
    wq / wk / wv, rotary, GQA SDPA, wo; RMSNorm, w2(silu(w1(x)) * w3(x))."""

    def __init__(self, h: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        d = h // heads
        self.heads, self.kv_heads, self.d = heads, kv_heads, d
        self.attention_norm, self.ffn_norm = nn.RMSNorm(h), nn.RMSNorm(h)
        self.wq = nn.Linear(h, heads * d, bias=False)
        self.wk = nn.Linear(h, kv_heads * d, bias=False)
        self.wv = nn.Linear(h, kv_heads * d, bias=False)
        self.wo = nn.Linear(heads * d, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        y = self.attention_norm(x)
        q = self.wq(y).view(b, s, self.heads, self.d)
        k = self.wk(y).view(b, s, self.kv_heads, self.d)
        v = self.wv(y).view(b, s, self.kv_heads, self.d)

        def rotate(t):
            t1, t2 = t.chunk(2, dim=-1)
            return torch.cat((t1 * cos - t2 * sin, t1 * sin + t2 * cos), dim=-1)

        q, k = rotate(q), rotate(k)
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        z = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(z)) * self.w3(z))


class Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        size = sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor))
        self.ops.append((func, size))
        return out


def kept_bytes(block: Block, x, cos, sin) -> tuple[int, list[str]]:
    """Bytes SelectiveAC keeps of one block's forward beyond its input, and what they are."""
    from torch._functorch.partitioners import get_default_op_list

    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    save |= {aten._scaled_dot_product_cudnn_attention.default,
             aten._scaled_dot_product_flash_attention_for_cpu.default,   # stands in (see above)
             aten.max.default, aten.topk.default}
    mm_ops = (aten.mm.default, aten.linear.default)
    with torch.no_grad(), Record() as rec:
        block(x, cos, sin)
    count, total, what = 0, 0, []
    for func, size in rec.ops:
        if func in mm_ops:
            count += 1
        if func in save and not (func in mm_ops and count % 2 == 0):
            total += size
            what.append(f"{func.__name__}:{size}")
    return total, what


SHAPE = dict(s=64, b=2, h=256, heads=8, kv_heads=2, ffn=896)
"""A small Llama block (GQA 4:1, SwiGLU ffn 3.5 h) whose bf16 tensors count the same bytes
per token as a full-size one."""


def sac_kept() -> dict:
    """What SelectiveAC keeps of one bf16 block of SHAPE: the kept ops' outputs (name:bytes,
    in order), the block input's bytes and the total."""
    s, b, h = SHAPE["s"], SHAPE["b"], SHAPE["h"]
    heads, kv_heads, ffn = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["ffn"]
    torch.manual_seed(0)
    block = Block(h, heads, kv_heads, ffn).to(torch.bfloat16)
    x = torch.randn(b, s, h, dtype=torch.bfloat16)
    d = h // heads
    angle = torch.arange(s)[:, None] * torch.ones(d // 2)[None, :]
    cos = angle.cos()[None, :, None, :].to(torch.bfloat16)
    sin = angle.sin()[None, :, None, :].to(torch.bfloat16)
    kept, what = kept_bytes(block, x, cos, sin)
    layer_input = x.numel() * x.element_size()
    return {"kept_ops": what, "layer_input_bytes": layer_input,
            "total_bytes": kept + layer_input}


def main() -> None:
    argparse.ArgumentParser().parse_args()
    measured = sac_kept()
    s, b, h, heads = SHAPE["s"], SHAPE["b"], SHAPE["h"], SHAPE["heads"]
    d = h // heads
    model = op_sac_layer_activation_bytes(
        seq_len=s, micro_batch=b, hidden=h, num_heads=heads, q_dim=heads * d,
        kv_dim=SHAPE["kv_heads"] * d, ffn_hidden=SHAPE["ffn"], gated=True, tp=1,
        sequence_parallel=False, bytes_per_value=2)
    print(json.dumps({"torch": torch.__version__, "shape": SHAPE, **measured,
                      "model_bytes": float(model),
                      "per_token_per_h": measured["total_bytes"] / (s * b * h * 2)}, indent=1))


if __name__ == "__main__":
    main()
