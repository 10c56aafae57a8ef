"""What Megatron-Core's own MoE layer keeps for its backward pass, counted on PyTorch's op
stream on CPU (not a unit test; needs torch, triton and einops, and Megatron-LM's
megatron/core, e.g. `git archive d98e8a64 megatron/core | tar -x -C DIR`).

    python bench/megatron_moe_memory.py --megatron DIR

It builds one MoELayer from Megatron-Core's local layer spec (router with a sigmoid score and
an expert bias, as DeepSeek-V3's; the alltoall dispatcher without permute fusion; 8 routed
experts of which each token takes 4, and a shared expert; bf16), runs its forward on a bf16
input made outside the count (the pre-MLP norm's output, which the layer formula counts as the
norm's) under a TorchDispatchMode that follows every storage the ops create until it is freed,
and prints what is alive after the forward, per token, by the op that made it, next to
`cost_models.memory`'s count of the same layer: `moe_activation_bytes` and the shared expert's
MLP internals. The CPU stand-ins (the experts as a sequence of MLPs, the unfused permutation)
keep what Transformer Engine's grouped linear and fused permutation keep, with two known
extras the fused kernels avoid: the unfused permutation's int64 sort indices over every
(token, expert) slot, and its int64 (token, expert) index of the kept pairs.

What it shows (torch 2.13.0+cpu, Megatron-Core @d98e8a64, tests/golden/test_pytorch_measured.py
pins it): the routed experts keep their input once (the permuted tokens, sorted by local
expert), the first matrix's output and the activation's output; the expert output is not kept,
because the routing probabilities are applied inside the activation (weighted SwiGLU, since
Megatron-LM commit 2659630721, April 2025) and the combine unpermutes without them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.enums import MlpKind  # noqa: E402
from cost_models.memory import moe_activation_bytes  # noqa: E402

TOKENS, HIDDEN, EXPERTS, TOP_K, EXPERT_FFN, SHARED_FFN = 256, 512, 8, 4, 128, 128


def _cpu_only(torch) -> None:
    """Let Megatron-Core's CUDA calls run on a CPU build: streams and events do nothing."""

    class Event:
        def __init__(self, *a, **k): pass
        def record(self, *a, **k): pass
        def wait(self, *a, **k): pass
        def synchronize(self): pass
        def query(self): return True

    class Stream:
        def __init__(self, *a, **k): pass
        def wait_stream(self, *a, **k): pass
        def wait_event(self, *a, **k): pass
        def synchronize(self): pass
        def record_event(self, *a, **k): return Event()

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.is_available = lambda: False
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None


def measure(megatron: Path) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    _cpu_only(torch)
    sys.path.insert(0, str(megatron))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    parallel_state.initialize_model_parallel(1, 1)

    config = TransformerConfig(
        num_layers=1, hidden_size=HIDDEN, num_attention_heads=8, ffn_hidden_size=4 * HIDDEN,
        num_moe_experts=EXPERTS, moe_router_topk=TOP_K, moe_ffn_hidden_size=EXPERT_FFN,
        moe_shared_expert_intermediate_size=SHARED_FFN, moe_token_dispatcher_type="alltoall",
        moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
        moe_router_load_balancing_type="none", moe_router_dtype="fp32",
        moe_permute_fusion=False, gated_linear_unit=True, activation_func=F.silu,
        bias_activation_fusion=True, add_bias_linear=False, normalization="RMSNorm",
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0)
    spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False)
    moe = build_module(spec, config=config, layer_number=1).mlp      # the layer's MoELayer

    class Live(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.alive = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if type(t) is torch.Tensor:
                    storage = t.untyped_storage()
                    key = storage.data_ptr()
                    if key not in self.alive or self.alive[key][0].expired():
                        self.alive[key] = (StorageWeakRef(storage), storage.nbytes(),
                                           func.__name__, list(t.shape), str(t.dtype))
            return out

    torch.manual_seed(0)
    x = torch.randn(TOKENS, 1, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    mode = Live()
    with mode:
        out, _ = moe(x)
    own = {p.untyped_storage().data_ptr() for p in moe.parameters()}
    own |= {b.untyped_storage().data_ptr() for b in moe.buffers()}
    own |= {out.untyped_storage().data_ptr(), x.untyped_storage().data_ptr()}
    kept = sorted(([n, f, s, d] for k, (w, n, f, s, d) in mode.alive.items()
                   if not w.expired() and k not in own), key=lambda row: -row[0])
    out.float().sum().backward()             # the graph is whole: the layer trains
    return {"source": "Megatron-Core @d98e8a64, torch " + torch.__version__, "tokens": TOKENS, "hidden": HIDDEN, "experts": EXPERTS, "top_k": TOP_K,
            "expert_ffn": EXPERT_FFN, "shared_ffn": SHARED_FFN,
            "kept_bytes": sum(row[0] for row in kept), "kept": kept}


def formula(measured: dict) -> dict:
    """The planner's count of the same layer: the router and routed experts, and the shared
    expert's MLP internals (its gate and up outputs and their product, 6 bytes per column)."""
    t, k = measured["tokens"], measured["top_k"]
    routed = moe_activation_bytes(pairs=t * k, tokens_per_rank=t, hidden=measured["hidden"],
                                  expert_ffn_hidden=measured["expert_ffn"],
                                  num_experts=measured["experts"], mlp=MlpKind.SWIGLU)
    return {"routed_and_router": routed, "shared": 6 * t * measured["shared_ffn"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron", type=Path, required=True,
                        help="a directory holding Megatron-LM's megatron/core")
    parser.add_argument("--json", type=Path, help="write the measurement here")
    args = parser.parse_args()
    measured = measure(args.megatron)
    t = measured["tokens"]
    for n, func, shape, dtype in measured["kept"]:
        print(f"{n / t:9.1f} B/token  {func:28s} {shape} {dtype}")
    counted = formula(measured)
    print(f"kept: {measured['kept_bytes'] / t:.1f} B/token; cost_models.memory: "
          f"{sum(counted.values()) / t:.1f} ({counted})")
    if args.json:
        head = {k: v for k, v in measured.items() if k != "kept"}
        rows = ",\n  ".join(json.dumps(row) for row in measured["kept"])
        args.json.write_text(json.dumps(head, indent=1)[:-2] + f',\n "kept": [\n  {rows}\n ]\n}}\n')


if __name__ == "__main__":
    main()
