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

With --model it builds instead a whole GPTModel of that kind (two MLA + MoE layers, one MTP
module, both losses; vocabulary 4,096, 256 tokens) with a flash-attention stand-in as the core
attention (it keeps Q, K, V, the output and the fp32 log-sum-exp, as flash kernels do), and
prints what its forward keeps next to the planner's activations of the same model on one GPU.
The local spec's norms keep fp32 copies of their input (8 bytes per value) where Transformer
Engine's keep the bf16 input (2): the comparison counts them as Transformer Engine would.

What the layer shows (torch 2.13.0+cpu, Megatron-Core @d98e8a64; pinned by
tests/golden/test_pytorch_measured.py): the routed experts keep their input once (the permuted
tokens, sorted by local expert), the first matrix's output and the activation's output; the
expert output is not kept, because the routing probabilities are applied inside the activation
(weighted SwiGLU, since Megatron-LM commit 2659630721, April 2025) and the combine unpermutes
without them. The whole model keeps 89,299 bytes per token with Transformer Engine's norms;
the planner counts 85,032 (-4.8%).
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


def _megatron(megatron: Path):
    """Torch and Megatron-Core ready on one CPU rank; the live-storage mode."""
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    _cpu_only(torch)
    sys.path.insert(0, str(megatron))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)

    class Live(TorchDispatchMode):
        """The storages the ops under it create, while they are alive."""

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

        def kept(self, module, *tensors) -> list:
            """[bytes, op, shape, dtype] of the storages still alive, but `module`'s
            parameters and buffers and `tensors`, largest first."""
            own = {p.untyped_storage().data_ptr() for p in module.parameters()}
            own |= {b.untyped_storage().data_ptr() for b in module.buffers()}
            own |= {t.untyped_storage().data_ptr() for t in tensors}
            return sorted(([n, f, s, d] for k, (w, n, f, s, d) in self.alive.items()
                           if not w.expired() and k not in own), key=lambda row: -row[0])

    return torch, Live


def _config(torch, *, mla: bool = False, **kw):
    """The MoE layer's settings (and `kw`), for a standard or a latent-attention model."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import (MLATransformerConfig,
                                                              TransformerConfig)
    base = dict(
        num_layers=1, hidden_size=HIDDEN, num_attention_heads=8, ffn_hidden_size=4 * HIDDEN,
        num_moe_experts=EXPERTS, moe_router_topk=TOP_K, moe_ffn_hidden_size=EXPERT_FFN,
        moe_shared_expert_intermediate_size=SHARED_FFN, moe_token_dispatcher_type="alltoall",
        moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
        moe_router_load_balancing_type="none", moe_router_dtype="fp32",
        moe_permute_fusion=False, gated_linear_unit=True, activation_func=F.silu,
        bias_activation_fusion=True, add_bias_linear=False, normalization="RMSNorm",
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0)
    return (MLATransformerConfig if mla else TransformerConfig)(**{**base, **kw})


def measure(megatron: Path) -> dict:
    torch, Live = _megatron(megatron)
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    config = _config(torch)
    spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False)
    moe = build_module(spec, config=config, layer_number=1).mlp      # the layer's MoELayer

    torch.manual_seed(0)
    x = torch.randn(TOKENS, 1, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    mode = Live()
    with mode:
        out, _ = moe(x)
    kept = mode.kept(moe, out, x)
    out.float().sum().backward()             # the graph is whole: the layer trains
    return {"source": "Megatron-Core @d98e8a64, torch " + torch.__version__, "tokens": TOKENS,
            "hidden": HIDDEN, "experts": EXPERTS, "top_k": TOP_K, "expert_ffn": EXPERT_FFN,
            "shared_ffn": SHARED_FFN, "kept_bytes": sum(row[0] for row in kept), "kept": kept}


MODEL = dict(num_layers=2, hidden=HIDDEN, num_heads=8, head_dim=32, q_lora_rank=192,
             kv_lora_rank=64, qk_rope_head_dim=16, v_head_dim=32, ffn_hidden=4 * HIDDEN,
             vocab_size=4096, num_experts=EXPERTS, top_k=TOP_K, moe_ffn_hidden=EXPERT_FFN,
             shared_ffn_hidden=SHARED_FFN, mtp_layers=1)
"""The whole model --model builds (DeepSeek-V3's kind at a small size)."""


def measure_model(megatron: Path) -> dict:
    torch, Live = _megatron(megatron)
    import torch.nn.functional as F
    import megatron.core.tensor_parallel.inference_layers as inference_layers
    import megatron.core.transformer.multi_token_prediction as mtp_module
    from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                          get_gpt_mtp_block_spec)
    from megatron.core.models.gpt.gpt_model import GPTModel
    # No inference layers on CPU: the MTP layer's check for them compares with None.
    inference_layers.is_inference_column_parallel_linear = lambda module: False
    mtp_module.is_inference_column_parallel_linear = lambda module: False
    m = MODEL
    config = _config(torch, mla=True, num_layers=m["num_layers"], q_lora_rank=m["q_lora_rank"],
                     kv_lora_rank=m["kv_lora_rank"], qk_head_dim=m["head_dim"],
                     qk_pos_emb_head_dim=m["qk_rope_head_dim"], v_head_dim=m["v_head_dim"],
                     qk_layernorm=True, apply_rope_fusion=False, rope_type="rope",
                     mtp_num_layers=m["mtp_layers"], mtp_loss_scaling_factor=0.1)

    class Flash(torch.autograd.Function):
        """What a flash kernel keeps: Q, K, V, the output and the fp32 log-sum-exp."""

        @staticmethod
        def forward(ctx, q, k, v):
            out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)),
                                                 is_causal=True).permute(2, 0, 1, 3).contiguous()
            lse = torch.empty(q.shape[1], q.shape[2], q.shape[0], dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad):
            return tuple(torch.zeros_like(t) for t in ctx.saved_tensors[:3])

    class FlashAttention(torch.nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def forward(self, query, key, value, attention_mask=None, **kwargs):
            out = Flash.apply(query, key, value)
            return out.reshape(out.shape[0], out.shape[1], -1)

    spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False,
                                    multi_latent_attention=True, qk_layernorm=True)
    spec.submodules.self_attention.submodules.core_attention = FlashAttention
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=m["vocab_size"],
                     max_sequence_length=TOKENS, position_embedding_type="rope",
                     mtp_block_spec=get_gpt_mtp_block_spec(config, spec,
                                                           use_transformer_engine=False))
    torch.manual_seed(0)
    ids = torch.randint(0, m["vocab_size"], (1, TOKENS))
    labels = torch.randint(0, m["vocab_size"], (1, TOKENS))
    mode = Live()
    with mode:
        loss = model(ids, torch.arange(TOKENS)[None], attention_mask=None, labels=labels)
    kept = mode.kept(model, loss)
    loss.float().sum().backward()
    # The local norms keep an fp32 copy of their input and its product with 1/rms (8 bytes
    # per value); Transformer Engine's keep the bf16 input: 2.
    widths = (m["hidden"], m["q_lora_rank"], m["kv_lora_rank"])      # the norms' widths
    norms = sum(row[0] for row in kept if row[3] == "torch.float32" and len(row[2]) == 3
                and row[1].split(".")[0] in ("_to_copy", "mul") and row[2][-1] in widths)
    return {"source": "Megatron-Core @d98e8a64, torch " + torch.__version__, "tokens": TOKENS,
            "model": m, "kept_bytes": sum(row[0] for row in kept),
            "as_transformer_engine_bytes": sum(row[0] for row in kept) - norms * 3 // 4,
            "kept": kept}


def model_formula(tmp: Path) -> float:
    """The planner's activations of MODEL on one GPU (one micro-batch of TOKENS tokens)."""
    import yaml
    from planner.costing.evaluate import evaluate_strategy
    from planner.inputs.loader import make_problem
    from planner.schemas.strategy import Strategy
    path = tmp / "model.yaml"
    path.write_text(yaml.safe_dump({
        "name": "deepseek-kind", **MODEL, "mlp": "swiglu", "norm": "rmsnorm",
        "position": "rotary", "tie_embeddings": False, "bias": False, "dropout": False,
        "first_k_dense": 0, "load_balancing": "forced",
        "training": {"seq_len": TOKENS, "global_batch": 8, "precision": "bf16"}}))
    problem = make_problem(str(path), "dgx-h100", gpus=8)
    strategy = Strategy(dp=8, tp=1, pp=1, micro_batch=1, global_batch=8, recompute="none",
                        zero_stage=1)
    return evaluate_strategy(problem, strategy).memory.stages[0].activations_bytes


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
    parser.add_argument("--model", action="store_true",
                        help="the whole model (MLA + MoE layers, MTP, losses), not one layer")
    args = parser.parse_args()
    if args.model:
        import tempfile
        measured = measure_model(args.megatron)
        with tempfile.TemporaryDirectory() as tmp:
            counted = model_formula(Path(tmp))
        t = measured["tokens"]
        for n, func, shape, dtype in measured["kept"][:12]:
            print(f"{n / t:9.1f} B/token  {func:28s} {shape} {dtype}")
        te = measured["as_transformer_engine_bytes"]
        print(f"kept: {measured['kept_bytes'] / t:.1f} B/token, {te / t:.1f} with Transformer "
              f"Engine's norms; the planner: {counted / t:.1f} ({counted / te - 1:+.1%})")
        if args.json:
            args.json.write_text(json.dumps({k: v for k, v in measured.items() if k != "kept"},
                                            indent=1) + "\n")
        return
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
