"""Memory the planner's formulas count, measured with PyTorch on the CPU.

    python bench/torch_memory.py            (needs torch; pip install torch)

Prints two measurements that tests/golden/test_pytorch_measured.py pins:

* qk_norm: bytes of the tensors autograd saves for the backward pass of a small Qwen3-style
  layer (RMSNorm, GQA attention with RMSNorm on each head's queries and keys before RoPE,
  SwiGLU MLP; HF transformers Qwen3Attention / Megatron-Core SelfAttention with
  qk_layernorm), with and without the QK norms, and with the whole layer checkpointed.
  Counted through torch.autograd.graph.saved_tensors_hooks, once per storage, leaving out the
  parameters and the rotary tables (computed once per model, shared by every layer).
  The norms save what the fused CUDA kernels save, their input and the fp32 1/rms per row
  (pytorch tools/autograd/derivatives.yaml `_fused_rms_norm`: input, result1, weight;
  Transformer Engine rmsnorm: inp, rsigma): the CPU decomposition of F.rms_norm keeps fp32
  copies no GPU run keeps, so `FusedRMSNorm` below saves exactly that set.
* recompute_modules: the same layer (with QK norms) under Megatron-Core's selective
  recompute by module: `mlp` checkpoints the MLP on the norm output (torch.utils.checkpoint,
  as tensor_parallel.checkpoint does); `layernorm` and `act` discard outputs as Megatron's
  CheckpointWithoutOutput does (the two norms' outputs; the SwiGLU product, the second MLP
  matrix's input, which is what `moe_act` drops in each expert): the tensors a consumer saved
  are not kept, and the backward gets them back as the recomputation would.
* fsdp2: bytes of parameters, gradients and AdamW states one rank holds after a step of
  fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32), as
  torchtitan applies it (torchtitan/distributed/fsdp.py), on two gloo ranks; and the bytes of
  one block's parameters while its forward runs (the gathered copy).
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

# The layer: hidden 256, 4 query heads of head_dim 128 (wider than hidden / heads, as in
# Qwen3-0.6B), 2 KV heads, SwiGLU of 512; sequence 32, micro-batch 2, bf16.
LAYER = dict(hidden=256, num_heads=4, num_kv_heads=2, head_dim=128, ffn_hidden=512)
SEQ_LEN, MICRO_BATCH = 32, 2
FSDP_WORLD = 2
FSDP_BLOCKS, FSDP_WIDTH, FSDP_FFN = 2, 64, 256


class _FusedRMSNormFn(torch.autograd.Function):
    """RMSNorm that saves what aten._fused_rms_norm saves on CUDA: input, rstd (fp32), weight."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return (x32 * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, rstd, weight = ctx.saved_tensors
        x32, g = x.float(), grad.float() * weight.float()
        normed = x32 * rstd
        dx = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        dw = (grad.float() * normed).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None


class FusedRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return _FusedRMSNormFn.apply(x, self.weight, self.eps)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Qwen3Layer(nn.Module):
    """HF transformers Qwen3DecoderLayer's dataflow (modeling_qwen3.py): q_norm/k_norm over
    head_dim on the projections, then RoPE, then SDPA (GQA), o_proj, SwiGLU MLP."""

    def __init__(self, *, hidden, num_heads, num_kv_heads, head_dim, ffn_hidden, qk_norm):
        super().__init__()
        self.a, self.g, self.d = num_heads, num_kv_heads, head_dim
        self.input_norm, self.post_norm = FusedRMSNorm(hidden), FusedRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)
        self.q_norm = FusedRMSNorm(head_dim) if qk_norm else nn.Identity()
        self.k_norm = FusedRMSNorm(head_dim) if qk_norm else nn.Identity()
        self.gate = nn.Linear(hidden, ffn_hidden, bias=False)
        self.up = nn.Linear(hidden, ffn_hidden, bias=False)
        self.down = nn.Linear(ffn_hidden, hidden, bias=False)

    discard = ()
    """Modules whose outputs are discarded and recomputed ('layernorm', 'act'), as Megatron's
    output-discarding checkpoint does; `discarded` collects those outputs."""
    checkpoint_mlp = False

    def _mlp(self, y):
        act = F.silu(self.gate(y)) * self.up(y)
        if "act" in self.discard:
            self.discarded.append(act)
        return self.down(act)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        self.discarded = []
        y = self.input_norm(x)
        if "layernorm" in self.discard:
            self.discarded.append(y)
        q = self.q_norm(self.q_proj(y).view(b, s, self.a, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(y).view(b, s, self.g, self.d)).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.g, self.d).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(o.transpose(1, 2).reshape(b, s, self.a * self.d))
        y = self.post_norm(x)
        if "layernorm" in self.discard:
            self.discarded.append(y)
        if self.checkpoint_mlp:
            return x + torch.utils.checkpoint.checkpoint(self._mlp, y, use_reentrant=False)
        return x + self._mlp(y)


def saved_activation_bytes(*, qk_norm: bool, checkpointed: bool = False,
                           recompute_modules: tuple[str, ...] = ()) -> int:
    """Bytes of the distinct storages autograd saves for one layer's backward pass;
    `recompute_modules` of 'mlp', 'layernorm', 'act' (see the module docstring)."""
    torch.manual_seed(0)
    layer = Qwen3Layer(**LAYER, qk_norm=qk_norm).to(torch.bfloat16)
    layer.discard = tuple(m for m in recompute_modules if m in ("layernorm", "act"))
    layer.checkpoint_mlp = "mlp" in recompute_modules
    d = LAYER["head_dim"]
    x = torch.randn(MICRO_BATCH, SEQ_LEN, LAYER["hidden"], dtype=torch.bfloat16,
                    requires_grad=True)
    angles = torch.arange(SEQ_LEN)[:, None] * (1e4 ** (-torch.arange(0, d, 2) / d))[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    shared = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), cos, sin)}
    storages: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in shared:
            storages[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if checkpointed:
            out = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
        else:
            out = layer(x, cos, sin)
    for t in getattr(layer, "discarded", []):     # recomputed in the backward, not kept
        storages.pop(t.untyped_storage().data_ptr(), None)
    out.float().sum().backward()         # the saved set is a valid backward graph
    return sum(storages.values())


def _fsdp_rank(rank: int, world: int, init_file: str, results) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(FSDP_WIDTH, FSDP_FFN, bias=False),
                                          nn.Linear(FSDP_FFN, FSDP_WIDTH, bias=False))
                            for _ in range(FSDP_BLOCKS)])
    num_params = sum(p.numel() for p in model.parameters())
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:                  # torchtitan: one unit per transformer block
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gathered = {}

    def record_gathered(module, inputs, output):   # inside the unit: its unsharded copy
        gathered.setdefault(module, module.weight.numel() * module.weight.element_size())

    for linear in model[0]:
        linear.register_forward_hook(record_gathered)
    model(torch.randn(4, FSDP_WIDTH)).float().pow(2).mean().backward()
    optimizer.step()

    def local_bytes(tensors):
        return sum(t.to_local().numel() * t.element_size() for t in tensors)

    params = list(model.parameters())
    results[rank] = dict(
        num_params=num_params, block_params=num_params // FSDP_BLOCKS,
        weights=local_bytes(params), gradients=local_bytes([p.grad for p in params]),
        optimizer=local_bytes([v for state in optimizer.state.values()
                               for v in state.values() if v.dim() > 0]),
        gathered_block=sum(gathered.values()))
    dist.destroy_process_group()


def fsdp2_state_bytes() -> dict[str, int]:
    """Per-rank bytes of FSDP2's sharded states (rank 0) and of one gathered block."""
    with tempfile.TemporaryDirectory() as tmp, mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_fsdp_rank, args=(FSDP_WORLD, os.path.join(tmp, "init"), results),
                 nprocs=FSDP_WORLD)
        return dict(results[0])


def main() -> None:
    print(f"# torch {torch.__version__}")
    print("qk_norm:")
    print(f"  without: {saved_activation_bytes(qk_norm=False)}")
    print(f"  with: {saved_activation_bytes(qk_norm=True)}")
    print(f"  with_checkpointed: {saved_activation_bytes(qk_norm=True, checkpointed=True)}")
    print("recompute_modules (with qk_norm):")
    for modules in (("layernorm",), ("mlp",), ("act",)):
        print(f"  {'+'.join(modules)}: "
              f"{saved_activation_bytes(qk_norm=True, recompute_modules=modules)}")
    print("fsdp2:")
    for key, value in fsdp2_state_bytes().items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
