"""HBM bytes of a torchtitan Llama block's memory-bound kernels in eager PyTorch, counted from
PyTorch's own dispatch on the CPU.

    python bench/torch_elementwise.py            (needs torch; pip install torch==2.13.0)

Without torch.compile every PyTorch op is one kernel that reads its inputs and writes its
output in HBM (tensors of 2^20 values and more do not stay in L2). This runs the elementwise
parts of torchtitan's Llama 3 block as torchtitan wrote them at 4d88a8a44 (2024-12, the code
of the December 2024 H100 measurements) in bf16, forward and backward through autograd, under a
TorchDispatchMode that adds up, for every ATen op that is not a GEMM or the attention kernel,
the bytes of its tensor inputs and outputs (views, reshapes, transposes and expands move
nothing):

* norm: torchtitan/models/norms.py RMSNorm (`rmsnorm`, the configs' norm_type):
  x.float(), x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), .type_as(x), * weight;
* rotary: torchtitan/models/llama/model.py apply_rotary_emb: q and k to fp32 complex pairs,
  times the frequencies, back to real and to bf16;
* kv_repeat: repeat_kv, each K/V head expanded and copied n_rep times for SDPA (GQA);
* attn_out: the attention output's transpose(1, 2).contiguous();
* swiglu: FeedForward's F.silu(w1(x)) * w3(x) (the GEMMs excluded);
* residual: the block's two residual adds;
* for comparison, ops eager PyTorch runs as one native kernel each: gelu (F.gelu), layernorm
  (F.layer_norm);
* expert_bias: Megatron-Core's biased experts (gpt-oss): TEGroupedMLP runs its second grouped
  linear with skip_bias_add and adds each local expert's bias weighted by the routing
  probability as eager ops, `t + b * p` per expert, torch.cat, .to(dtype)
  (megatron/core/transformer/moe/experts.py _apply_bias, a329dd6da5 2025-09-22 "Enable bias
  in expert mlp"), probabilities in bf16 (the router's dtype unless --moe-router-dtype);
* glu_clamp: Megatron-Core's clamped GLU (gpt-oss's experts): weighted_bias_quick_geglu_impl
  clamps the gate half from above and the linear half to [-7, 7] and torch.cat's them before
  its fused kernel (megatron/core/fusions/fused_bias_geglu.py, 2e29a5e1e3 2025-09-09); also
  what autograd keeps for it (`kept`: the unclamped input, which the clamps save).

Each is printed as bytes per element of the tensor it scales with (norm, attn_out, residual:
s b h; rotary: s b (a + a_kv) d; kv_repeat: s b a d of the repeated K and V together; swiglu,
gelu: s b f; expert_bias: token-expert pairs x h; glu_clamp: rows x the GLU's output
columns), forward and backward apart. tests/golden/test_pytorch_measured.py pins them and
`cost_models.compute.EAGER_ELEMENTWISE` carries them.
"""

from __future__ import annotations

import json


def eager_bytes_per_element() -> dict[str, dict]:
    """{component: {forward, backward (bytes per element), forward_ops, backward_ops}}."""
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    moves_nothing = {"view", "_unsafe_view", "reshape", "transpose", "t", "expand", "permute",
                     "as_strided", "view_as_complex", "view_as_real", "detach", "alias",
                     "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes",
                     "_reshape_alias", "lift_fresh", "empty", "empty_like", "ones_like",
                     "zeros_like", "new_empty_strided", "_conj"}
    priced_elsewhere = {"mm", "addmm", "bmm", "_scaled_dot_product_flash_attention",
                        "_scaled_dot_product_efficient_attention"}

    class Traffic(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes = 0
            self.ops = []
            self.kept = 0       # bytes of the storages autograd saves (set by `measure`)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__.rstrip("_")
            if name in moves_nothing or name in priced_elsewhere:
                return out
            moved = 0
            # An input is read once however it is viewed (an expanded K/V head: its storage);
            # the output is written whole.
            for t in torch.utils._pytree.tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor):
                    moved += min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    moved += t.numel() * t.element_size()
            self.bytes += moved
            self.ops.append((name, moved))
            return out

    def measure(fn, inputs, grad_like):
        """Bytes forward and backward of fn(*inputs), the inputs requiring grad (their
        gradients returned, not accumulated: inside a block they flow on), and the bytes of
        the storages autograd saves for the backward (each storage once)."""
        fwd, bwd = Traffic(), Traffic()
        saved = {}

        def pack(t):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), fwd:
            out = fn(*inputs)
        fwd.kept = sum(saved.values())
        outs = out if isinstance(out, tuple) else (out,)
        grads = tuple(grad_like(o) for o in outs)
        with bwd:
            torch.autograd.grad(outs, [*inputs, *extra_leaves], grads)
        return fwd, bwd

    torch.manual_seed(0)
    s, b, h, a, a_kv, f = 256, 2, 512, 8, 2, 1792
    d = h // a
    bf16 = torch.bfloat16
    sbh = s * b * h

    def leaf(*shape, dtype=bf16):
        return torch.randn(*shape, dtype=dtype).requires_grad_()

    results = {}

    extra_leaves = []      # parameters whose gradient the backward computes (the norm weight)

    def record(name, per, fn, inputs, grad_like=torch.ones_like):
        fwd, bwd = measure(fn, inputs, grad_like)
        results[name] = {"forward": fwd.bytes / per, "backward": bwd.bytes / per,
                         "kept": fwd.kept / per,
                         "forward_ops": [o for o, _ in fwd.ops],
                         "backward_ops": [o for o, _ in bwd.ops]}

    # RMSNorm (norms.py @4d88a8a44), weight a bf16 parameter.
    weight = torch.ones(h, dtype=bf16, requires_grad=True)
    extra_leaves.append(weight)

    def rmsnorm(x):
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x)
        return out * weight
    record("norm", sbh, rmsnorm, [leaf(b, s, h)])
    extra_leaves.clear()

    # apply_rotary_emb (model.py @4d88a8a44).
    angles = torch.arange(s)[:, None] * (1.0 / 500000 ** (torch.arange(0, d, 2) / d))[None]
    freqs = torch.polar(torch.ones_like(angles), angles).view(1, s, 1, d // 2)

    def rotary(q, k):
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        k_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
        return (torch.view_as_real(q_ * freqs).flatten(3).type_as(q),
                torch.view_as_real(k_ * freqs).flatten(3).type_as(k))
    record("rotary", s * b * (a + a_kv) * d, rotary, [leaf(b, s, a, d), leaf(b, s, a_kv, d)])

    # repeat_kv (model.py @4d88a8a44): K and V, each n_rep = a / a_kv times.
    n_rep = a // a_kv

    def repeat_kv(x):
        bs, slen, kv, hd = x.shape
        return x[:, :, :, None, :].expand(bs, slen, kv, n_rep, hd).reshape(bs, slen, kv * n_rep,
                                                                            hd)
    record("kv_repeat", 2 * s * b * a * d, lambda k, v: (repeat_kv(k), repeat_kv(v)),
           [leaf(b, s, a_kv, d), leaf(b, s, a_kv, d)])

    # The attention output: (b, a, s, d) back to (b, s, a * d).
    record("attn_out", sbh, lambda o: o.transpose(1, 2).contiguous().view(b, s, -1),
           [leaf(b, a, s, d)])

    # SwiGLU's elementwise part: silu(w1 x) * w3 x.
    record("swiglu", s * b * f, lambda g, u: F.silu(g) * u, [leaf(b, s, f), leaf(b, s, f)])

    # For comparison, ops eager PyTorch runs as one native kernel: GeLU, LayerNorm.
    record("gelu", s * b * f, F.gelu, [leaf(b, s, f)])
    ln_weight, ln_bias = (torch.ones(h, dtype=bf16, requires_grad=True),
                          torch.zeros(h, dtype=bf16, requires_grad=True))
    extra_leaves[:] = [ln_weight, ln_bias]
    record("layernorm", sbh, lambda x: F.layer_norm(x, (h,), ln_weight, ln_bias), [leaf(b, s, h)])
    extra_leaves.clear()

    # The two residual adds: h = x + attn(...), out = h + ffn(...).
    record("residual", sbh, lambda x, y, z: (x + y) + z,
           [leaf(b, s, h), leaf(b, s, h), leaf(b, s, h)])

    # Megatron-Core's expert bias (experts.py _apply_bias @a329dd6da5): the second grouped
    # linear's output of s b token-expert pairs over 4 local experts, each expert's bias (a
    # parameter) times the pair's routing probability added to its rows.
    experts = 4
    per_expert = [s * b // experts] * experts
    biases = [torch.randn(h, dtype=bf16, requires_grad=True) for _ in range(experts)]
    extra_leaves[:] = biases

    def expert_bias(out, probs):
        rows = zip(torch.split(out, per_expert), biases, torch.split(probs, per_expert))
        return torch.cat([t + bias * p for t, bias, p in rows]).view(out.shape).to(out.dtype)
    record("expert_bias", s * b * h, expert_bias, [leaf(s * b, h), leaf(s * b, 1)])
    extra_leaves.clear()

    # Megatron-Core's clamped GLU (weighted_bias_quick_geglu_impl @2e29a5e1e3): the first
    # grouped linear's output, s b rows of 2 f, each half clamped, concatenated again.
    def glu_clamp(y, limit=7.0):
        x_glu, x_linear = y.chunk(2, -1)
        return torch.cat((x_glu.clamp(min=None, max=limit),
                          x_linear.clamp(min=-limit, max=limit)), -1)
    record("glu_clamp", s * b * f, glu_clamp, [leaf(s * b, 2 * f)])

    return results


def main() -> None:
    import torch

    results = eager_bytes_per_element()
    print(json.dumps({"torch": torch.__version__, "bytes_per_element": {
        k: {"forward": round(v["forward"], 3), "backward": round(v["backward"], 3),
            "kept": round(v["kept"], 3)}
        for k, v in results.items()}}, indent=1))
    for k, v in results.items():
        print(f"# {k}: forward {v['forward_ops']}; backward {v['backward_ops']}")


if __name__ == "__main__":
    main()
