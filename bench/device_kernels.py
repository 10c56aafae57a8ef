"""Kernel rates on one GPU, for the constants the cost models take from a preset or profile.

Run on a GPU machine (needs PyTorch with CUDA; never in tests or CI):

    python bench/device_kernels.py --out bench/data/kernels_h100.json [--sections moe,cudnn]

It times, with CUDA events (median of repeats after warm-up, random inputs):
- attention forward and forward+backward through PyTorch SDPA, per backend (FlashAttention-2
  in PyTorch, cuDNN fused attention, memory-efficient), causal, at several sequence lengths;
  FLOPs counted as `cost_models.compute.flash_attention_time_s` counts them;
- bf16 GEMMs of training shapes (cuBLAS through torch.mm) and FP8 tensorwise GEMMs
  (torch._scaled_mm), at 8,192 tokens and (section gemm_tokens) at 1K-16K tokens for
  tensor-parallel shards of GPT-3 175B and Llama 3 8B;
- grouped expert GEMMs (torch._grouped_mm, what torchtitan runs) and a loop of one GEMM per
  expert (what Transformer Engine's GroupedLinear launches), by tokens per expert;
- the fused AdamW step (torch.optim.AdamW fused=True) over fp32 parameters, a gradient norm
  (torch._foreach_norm), a buffer zero;
- the host's launch time per small kernel in eager mode and in a CUDA-graph replay;
- the MoE token path: the GPU idle time one device-to-host copy of split sizes adds to a
  chain of GEMMs, and the router, permutation and unpermutation kernels (PyTorch ops as
  Megatron-Core's moe_utils runs them) at Qwen3-30B-A3B and GPT-OSS shapes;
- attention through cuDNN's graph API as Transformer Engine's FusedAttention builds it
  (`fused_attn_f16_arbitrary_seqlen.cu`: diagonal band for sliding windows, sink_token for a
  learnable softmax offset), forward and backward, GPT-OSS and Llama shapes, and GPT-OSS's
  biased expert GEMM (cuBLASLt bias epilogue) and bias gradient. Needs the cuDNN frontend's
  Python package (`pip install nvidia-cudnn-frontend==1.22.0`, the first whose bindings take
  sink_token); without it the section records an error row;
- torchtitan's eager RMSNorm, rotary embedding and SwiGLU product against the same functions
  under torch.compile, forward and forward+backward, Llama 3 8B shapes (the bytes of the
  eager ops: bench/torch_elementwise.py), and one plain copy for the HBM rate;
- FP8 against bf16 GEMMs by shape, cuBLASLt's fast accumulation off and on (section fp8_shapes);
- torchao's float8 rowwise GEMM (one scale per row and column) and its per-row cast, eager and
  compiled, against bf16 and tensorwise (section fp8_rowwise); its compiled casts per row, per
  column and per tensor against a plain copy (section fp8_casts);
- one rank's work in PyTorch's load-balanced ring attention (torchtitan's context parallelism)
  at cp 1-8, the flash kernels alone and with the eager fp32 merges, Llama 3.1 8B shapes.
Every row records the GPU name, torch and cuDNN versions.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--sustain-ms", type=float, default=100.0,
                        help="gemm_grid: least time each shape runs for")
    parser.add_argument("--sections",
                        default="peak,attention,gemm,gemm_tokens,grouped,optimizer,launch,moe,"
                                "cudnn,eager,ring,fp8_shapes,fp8_rowwise,fp8_casts,fp8_rowwise_linear,"
                                "fp8_transpose,"
                                "gemm_grid,"
                                "grouped_streams",
                        help="comma-separated sections to run")
    args = parser.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    meta = {"gpu": props.name, "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 2), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda}
    print(json.dumps(meta), flush=True)
    rows: list[dict] = []

    def keep(row):
        """Keep a measured row and print it at once (a run cut short keeps what it printed)."""
        rows.append(row)
        print(json.dumps(row), flush=True)

    def failure(exc) -> str:
        """A failed measurement, for its row: the exception's type and message, cut short."""
        return f"{type(exc).__name__}: {exc}"[:300]

    def timed(fn, reps=10, warmup=3):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    def captured(fn, n):
        """A CUDA graph of `fn` run n times (warmed up once on a side stream first): its
        replays time the kernels without the host's launches."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
        return graph

    def tn_gemm(m, n, k):
        """One shape's bf16 GEMM and its FP8 (tensorwise scales; `fp8(fast)`: cuBLASLt's fast
        accumulation on or off) as calls, in the one layout torch._scaled_mm takes on Hopper:
        "TN", y = x W^T with W stored [n x k]."""
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev, dtype=torch.float32)

        def fp8(fast):
            return lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16, use_fast_accum=fast)
        return (lambda: a @ w.t()), fp8

    def axiswise_cast(x, dim=-1):
        """torchao's float8 cast of a bf16 tensor with one scale per slice along `dim` (per
        row: -1, per column: 0, per tensor: None): amax, scale, clamp, fp8. Returns the FP8
        tensor and the scale torch._scaled_mm multiplies back (amax / 448)."""
        magnitude = x.abs()
        amax = (magnitude.amax() if dim is None else magnitude.amax(dim=dim, keepdim=True))
        scale = 448.0 / amax.float().clamp(min=1e-12)
        return (x.float() * scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), 1.0 / scale

    wanted = set(args.sections.split(","))

    def section(name, body):
        if name not in wanted:
            return
        t0 = time.time()
        try:
            body()
        except Exception:  # a failed section must not lose the others
            traceback.print_exc()
            rows.append({"section": name, "error": traceback.format_exc(limit=1)[-400:]})
        print(f"# {name}: {time.time() - t0:.1f} s", flush=True)

    # --- peak references: large GEMM and device copy ------------------------------------
    def peaks():
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        s = timed(lambda: a @ b)
        rows.append({"section": "peak", "kind": "bf16_gemm_8192", "s": s,
                     "tflops": 2 * 8192**3 / s / 1e12})
        x = torch.empty(2 * 2**30, dtype=torch.uint8, device=dev)
        y = torch.empty_like(x)
        s = timed(lambda: y.copy_(x))
        rows.append({"section": "peak", "kind": "d2d_copy_2GiB", "s": s,
                     "gb_per_s_read_plus_write": 2 * x.numel() / s / 1e9})
    section("peak", peaks)

    # --- attention ------------------------------------------------------------------------
    def attention():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
        backends = {"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                    "efficient": SDPBackend.EFFICIENT_ATTENTION}
        shapes = [(128, 32, s) for s in (1024, 2048, 4096, 8192, 16384, 32768, 65536)]
        shapes += [(64, 64, s) for s in (4096, 8192)]      # GPT-OSS head_dim 64
        if args.quick:
            shapes = [(128, 32, 4096), (128, 32, 16384)]
        for d, heads, seq in shapes:
            batch = max(1, 32768 // seq)
            q, k, v = (torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            grad = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16)
            fwd_flops = 2 * seq * (seq / 2) * (2 * d) * batch * heads   # causal: s/2 keys each
            reps = 3 if seq >= 32768 else 10
            for name, backend in backends.items():
                try:
                    with sdpa_kernel([backend]):
                        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        s_fwd = timed(f, reps=reps)

                        def fb():
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            out.backward(grad)
                        s_fb = timed(fb, reps=reps)
                except Exception as exc:
                    rows.append({"section": "attention", "backend": name, "head_dim": d,
                                 "heads": heads, "seq": seq, "error": str(exc)[:200]})
                    continue
                s_bwd = s_fb - s_fwd
                rows.append({"section": "attention", "backend": name, "head_dim": d,
                             "heads": heads, "seq": seq, "batch": batch, "fwd_s": s_fwd,
                             "fwd_bwd_s": s_fb, "fwd_tflops": fwd_flops / s_fwd / 1e12,
                             "bwd_tflops": 2.5 * fwd_flops / s_bwd / 1e12,
                             "fwd_bwd_tflops": 3.5 * fwd_flops / s_fb / 1e12})
                print(json.dumps(rows[-1]), flush=True)
            del q, k, v, grad
    section("attention", attention)

    # --- dense GEMMs ------------------------------------------------------------------------
    def time_gemm(m, n, k, fp8):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        flops = 2 * m * n * k
        s_fwd = timed(lambda: a @ w.t())              # y = x W^T (forward, "NT")
        g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        s_dgrad = timed(lambda: g @ w)                  # dX = dY W ("NN")
        s_wgrad = timed(lambda: g.t() @ a)              # dW = dY^T X ("TN")
        row = {"section": "gemm", "m": m, "n": n, "k": k, "bf16_fwd_tflops": flops / s_fwd / 1e12,
               "bf16_dgrad_tflops": flops / s_dgrad / 1e12,
               "bf16_wgrad_tflops": flops / s_wgrad / 1e12}
        if fp8:
            try:
                a8 = a.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                one = torch.ones((), device=dev, dtype=torch.float32)
                s8 = timed(lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one,
                                                    out_dtype=torch.bfloat16))
                row["fp8_fwd_tflops"] = flops / s8 / 1e12
            except Exception as exc:
                row["fp8_error"] = str(exc)[:200]
        keep(row)

    def has_fp8():
        return hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")

    def gemms():
        m = 8192
        nk = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (12288, 12288),
              (36864, 12288), (12288, 49152), (2048, 2048), (1536, 2048), (2048, 768),
              (1024, 4096), (4096, 1024), (512, 4096), (4096, 512), (256, 4096),
              (5760, 2880), (2880, 2880), (16384, 16384), (53248, 16384)]
        if args.quick:
            nk = nk[:4]
        for n, k in nk:
            time_gemm(m, n, k, has_fp8())
    section("gemm", gemms)

    def gemm_tokens():
        # The token dimension (micro-batch x sequence / cp, m) of tensor-parallel shards: the
        # planner's choice of micro-batch and tp at small m rests on the GEMM rate there
        # (`compute.gemm_time_s` charges min(m, n, k)); rows join section "gemm".
        shards = [(4608, 12288), (12288, 1536), (6144, 12288), (12288, 6144),   # GPT-3 175B tp 8
                  (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),     # Llama 3 8B
                  (3072, 4096), (4096, 1792), (1280, 8192), (8192, 3584)]       # tp 2 / tp 8
        tokens = [1024, 2048, 4096, 16384]
        if args.quick:
            shards, tokens = shards[:2], tokens[:2]
        for m in tokens:
            for n, k in shards:
                time_gemm(m, n, k, has_fp8())
    section("gemm_tokens", gemm_tokens)

    def fp8_shapes():
        # FP8 against bf16 by GEMM shape, in the one layout torch._scaled_mm takes on Hopper
        # ("TN": Transformer Engine quantizes transposed copies so that dgrad and wgrad run TN
        # as well), tensorwise scales, cuBLASLt's fast accumulation off (torch's default; TE's
        # dgrad and wgrad: split accumulator) and on (TE's fprop). Each time is one GEMM of 10
        # replayed from a CUDA graph: kernel time without the host's launch. Shapes: the gemm
        # section's at 8,192 tokens; Qwen3-30B-A3B's expert GEMMs (fc1 2048 -> 2 x 768, fc2
        # 768 -> 2048) by tokens per expert; Transformer Engine's GEMM profiling example (docs/
        # examples/gemm_profiling: hidden 4096, MLP 16384, 15,872 tokens), fprop, dgrad and
        # wgrad of its four layers, whose per-layer FP8 / bf16 ratio the tutorial reports.

        def gpu_time(fn, n=10):
            return timed(captured(fn, n).replay) / n

        shapes = [("gemm", 8192, n, k) for n, k in
                  [(4096, 4096), (28672, 4096), (12288, 12288), (16384, 16384), (2048, 2048),
                   (1024, 4096), (4096, 1024), (512, 4096), (4096, 512), (2880, 2880)]]
        shapes += [("qwen3-30b-a3b expert", m, n, k) for m in (256, 1024, 4096, 16384)
                   for n, k in [(1536, 2048), (2048, 768)]]
        # GPT-3 175B's tensor-parallel shards (tp 4 and tp 8) by tokens per micro-batch:
        # few tokens with wide n and k (a long K loop, many tiles).
        shapes += [(f"gpt3-175b tp{t} by tokens", m, n, k) for m in (1024, 2048, 4096, 8192)
                   for t, n, k in [(4, 9216, 12288), (4, 12288, 3072), (4, 12288, 12288),
                                   (8, 4608, 12288), (8, 12288, 1536), (8, 6144, 12288)]]
        tokens = 31 * 512
        for n, k in [(12288, 4096), (4096, 4096), (16384, 4096), (4096, 16384)]:
            shapes += [("te gemm_profiling fprop", tokens, n, k),
                       ("te gemm_profiling dgrad", tokens, k, n),
                       ("te gemm_profiling wgrad", n, k, tokens)]
        for label, m, n, k in shapes:
            bf16, fp8 = tn_gemm(m, n, k)
            flops = 2 * m * n * k
            row = {"section": "fp8_shapes", "shape": label, "m": m, "n": n, "k": k}
            try:
                row["bf16_s"] = gpu_time(bf16)
                for fast in (False, True):
                    row[f"fp8_{'fast' if fast else 'split'}_s"] = gpu_time(fp8(fast))
                for key in ("bf16", "fp8_split", "fp8_fast"):
                    row[f"{key}_tflops"] = flops / row[f"{key}_s"] / 1e12
            except Exception as exc:
                row["error"] = failure(exc)
            keep(row)
            del bf16, fp8
    section("fp8_shapes", fp8_shapes)

    def fp8_rowwise():
        # torchao's float8 rowwise recipe against bf16 and tensorwise, kernel by kernel: the
        # GEMM with one fp32 scale per row of x and per column of W (torch._scaled_mm's
        # rowwise path, CUTLASS on Hopper), fast accumulation on (torchao's output GEMM) and
        # off (its dgrad / wgrad), and the cast that feeds it: per-row amax, scale, clamp and
        # fp8 conversion of a bf16 [m, k] tensor, eager and under torch.compile (torchao
        # compiles it with the model). Shapes: Transformer Engine's gemm_profiling layer (the
        # one the rowwise constant of the presets was derived on) and Llama 3 8B's linear
        # layers at tp 1 (16,384 tokens: torchao's 8-GPU FSDP run) and tp 8 (98,304 gathered
        # tokens: torchtitan's async-TP benchmark, local batch 12 x 8,192).

        def gpu_time(fn, n=10):
            return timed(captured(fn, n).replay) / n

        shapes = []
        tokens = 31 * 512
        for n, k in [(12288, 4096), (4096, 4096), (16384, 4096), (4096, 16384)]:
            shapes += [("te gemm_profiling fprop", tokens, n, k),
                       ("te gemm_profiling dgrad", tokens, k, n),
                       ("te gemm_profiling wgrad", n, k, tokens)]
        for tp, m in ((1, 16384), (8, 98304)):
            for name, n, k in (("wqkv", 6144 // tp, 4096), ("wo", 4096, 4096 // tp),
                               ("w13", 28672 // tp, 4096), ("w2", 4096, 14336 // tp)):
                shapes.append((f"llama3-8b tp{tp} {name} fprop", m, n, k))

        cast = axiswise_cast

        for label, m, n, k in shapes:
            row = {"section": "fp8_rowwise", "shape": label, "m": m, "n": n, "k": k}
            torch._dynamo.reset()          # each shape compiled on its own, static, as a
            compiled = torch.compile(cast, dynamic=False)   # model's fixed shapes are
            try:
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                one = torch.ones((), device=dev, dtype=torch.float32)
                sa = torch.rand(m, 1, device=dev, dtype=torch.float32) + 0.5
                sb = torch.rand(1, n, device=dev, dtype=torch.float32) + 0.5
                flops = 2 * m * n * k
                row["bf16_s"] = gpu_time(lambda: a @ w.t())
                row["tensorwise_fast_s"] = gpu_time(lambda: torch._scaled_mm(
                    a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                    use_fast_accum=True))
                for fast in (True, False):
                    row[f"rowwise_{'fast' if fast else 'split'}_s"] = gpu_time(
                        lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb,
                                                 out_dtype=torch.bfloat16, use_fast_accum=fast))
                for key in ("bf16", "tensorwise_fast", "rowwise_fast", "rowwise_split"):
                    row[f"{key}_tflops"] = flops / row[f"{key}_s"] / 1e12
                row["cast_eager_s"] = timed(lambda: cast(a))
                compiled(a)
                row["cast_compiled_s"] = timed(lambda: compiled(a))
                row["cast_bytes"] = m * k * 3      # read bf16 and write fp8 once: the floor
            except Exception as exc:
                row["error"] = failure(exc)
            keep(row)
    section("fp8_rowwise", fp8_rowwise)

    def fp8_casts():
        # torchao's casts alone, under torch.compile, each direction a GEMM reads: per row
        # (scales along dim -1: the output GEMM's input, dgrad's output gradient), per column
        # (dim 0: wgrad's input and output gradient), and per tensor (one amax over the whole
        # tensor, then the cast: tensorwise), on the [m, k] activations of the fp8_rowwise
        # section's Llama 3 8B shapes and Transformer Engine's layer.
        shapes = [(31 * 512, 4096), (31 * 512, 16384), (4096, 31 * 512), (16384, 4096),
                  (16384, 14336), (98304, 4096), (98304, 512), (98304, 1792), (98304, 768)]
        for m, k in shapes:
            row = {"section": "fp8_casts", "m": m, "k": k, "bytes_per_value": 5}
            torch._dynamo.reset()          # static kernels for this shape, as in a model
            per_row = torch.compile(lambda x: axiswise_cast(x, -1), dynamic=False)
            per_column = torch.compile(lambda x: axiswise_cast(x, 0), dynamic=False)
            per_tensor = torch.compile(lambda x: axiswise_cast(x, None), dynamic=False)
            try:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                for name, fn in (("row", per_row), ("column", per_column),
                                 ("tensor", per_tensor)):
                    fn(x)
                    row[f"{name}_s"] = timed(lambda: fn(x))
                    row[f"{name}_gb_per_s"] = 5 * m * k / row[f"{name}_s"] / 1e9
                row["copy_s"] = timed(lambda: x.clone())
                row["copy_gb_per_s"] = 4 * m * k / row["copy_s"] / 1e9
            except Exception as exc:
                row["error"] = failure(exc)
            keep(row)
    section("fp8_casts", fp8_casts)

    def fp8_rowwise_linear():
        # One linear layer's forward and backward as torchao's rowwise float8 runs it, against
        # bf16: casts compiled per shape (per row for the output GEMM's operands and dgrad's
        # output gradient, per column for wgrad's), and the layout copies torch._scaled_mm
        # needs (its first operand row-major, its second column-major; torchao's
        # float8_ops.preprocess_addmm makes them with .contiguous()): dgrad reads the weight
        # cast per column as a column-major [n, k], wgrad the output gradient's transpose
        # row-major and the input column-major. Llama 3 8B's linear layers at tp 1 (16,384
        # tokens) and tp 8 (98,304 gathered tokens), summed per layer.
        for option in ("cache_size_limit", "recompile_limit"):   # a static kernel per shape
            if hasattr(torch._dynamo.config, option):
                setattr(torch._dynamo.config, option, 64)
        for tp, m in ((1, 16384), (8, 98304)):
            torch._dynamo.reset()
            rows_cast = torch.compile(lambda x: axiswise_cast(x, -1), dynamic=False)
            cols_cast = torch.compile(lambda x: axiswise_cast(x, 0), dynamic=False)
            totals = {"bf16_s": 0.0, "rowwise_s": 0.0, "rowwise_no_copies_s": 0.0}
            for name, n, k in (("wqkv", 6144 // tp, 4096), ("wo", 4096, 4096 // tp),
                               ("w13", 28672 // tp, 4096), ("w2", 4096, 14336 // tp)):
                row = {"section": "fp8_rowwise_linear", "tp": tp, "layer": name, "m": m,
                       "n": n, "k": k}
                try:
                    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                    g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)

                    def bf16():
                        x @ w.t()
                        g @ w
                        g.t() @ x

                    def rowwise(copies=True):
                        x8, sx = rows_cast(x)                     # [m, k], scale [m, 1]
                        w8, sw = rows_cast(w)                     # [n, k], scale [n, 1]
                        torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw.t(),
                                         out_dtype=torch.bfloat16, use_fast_accum=True)
                        g8, sg = rows_cast(g)                     # dgrad: g [m, n] @ w [n, k]
                        wc8, swc = cols_cast(w)                   # w per column: [n, k], [1, k]
                        b = wc8.t().contiguous().t() if copies else wc8.t().t()
                        torch._scaled_mm(g8, b, scale_a=sg, scale_b=swc,
                                         out_dtype=torch.bfloat16)
                        gc8, sgc = cols_cast(g)                   # wgrad: g^T [n, m] @ x [m, k]
                        xc8, sxc = cols_cast(x)
                        a = gc8.t().contiguous() if copies else gc8.t()
                        bx = xc8.t().contiguous().t() if copies else xc8
                        torch._scaled_mm(a, bx, scale_a=sgc.t(), scale_b=sxc,
                                         out_dtype=torch.bfloat16)
                    row["bf16_s"] = timed(bf16)
                    row["rowwise_s"] = timed(rowwise)
                    try:
                        row["rowwise_no_copies_s"] = timed(lambda: rowwise(copies=False))
                    except Exception as exc:      # _scaled_mm refuses the wrong layouts
                        row["no_copies_error"] = failure(exc)
                    for key in totals:
                        totals[key] += row.get(key, float("nan"))
                    row["rowwise_over_bf16"] = row["bf16_s"] / row["rowwise_s"]
                except Exception as exc:
                    row["error"] = failure(exc)
                keep(row)
            keep({"section": "fp8_rowwise_linear", "tp": tp, "layer": "all four", **totals,
                  "rowwise_over_bf16": totals["bf16_s"] / totals["rowwise_s"]})
    section("fp8_rowwise_linear", fp8_rowwise_linear)

    def fp8_transpose():
        # The layout copies torch._scaled_mm forces (x.t().contiguous()) on FP8 and bf16
        # tensors of activation size, against a plain copy of the same bytes.
        for m, k in ((16384, 4096), (98304, 4096), (98304, 768), (98304, 512), (16384, 14336)):
            row = {"section": "fp8_transpose", "m": m, "k": k}
            try:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                x8 = x.to(torch.float8_e4m3fn)
                row["fp8_transpose_s"] = timed(lambda: x8.t().contiguous())
                row["fp8_copy_s"] = timed(lambda: x8.clone())
                row["bf16_transpose_s"] = timed(lambda: x.t().contiguous())
                row["bf16_copy_s"] = timed(lambda: x.clone())
                for key in ("fp8_transpose", "fp8_copy"):
                    row[f"{key}_gb_per_s"] = 2 * m * k / row[f"{key}_s"] / 1e9
                for key in ("bf16_transpose", "bf16_copy"):
                    row[f"{key}_gb_per_s"] = 4 * m * k / row[f"{key}_s"] / 1e9
            except Exception as exc:
                row["error"] = failure(exc)
            keep(row)
    section("fp8_transpose", fp8_transpose)

    def gemm_grid():
        # bf16 and FP8 (tensorwise scales, fast accumulation: TE's fprop) GEMMs over a grid of
        # tokens m, width n and reduction k, "TN" as in fp8_shapes: the shape rule
        # `compute.gemm_time_s` needs. Each shape replays a CUDA graph of 10 GEMMs for at least
        # --sustain-ms, after a heat-up, so every shape runs at the clock a GPU holds under
        # sustained load (a training step's): a short burst runs mid-size GEMMs up to 10%
        # faster than large ones, which would read as a shape effect.

        def sustained_time(fn, n=10):
            graph = captured(fn, n)
            once = timed(graph.replay, reps=1, warmup=1)
            reps = max(2, int(args.sustain_ms / 1e3 / once) + 1)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / reps / n

        big = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        t0 = time.time()
        while time.time() - t0 < 3.0:                    # heat-up to the sustained clock
            big @ big
            torch.cuda.synchronize()
        del big
        ms = [256, 512, 1024, 2048, 4096, 8192, 16384]
        nks = [512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
        if args.quick:
            ms, nks = ms[::3], nks[::4]
        for m in ms:
            for n in nks:
                for k in nks:
                    bf16, fp8 = tn_gemm(m, n, k)
                    row = {"section": "gemm_grid", "m": m, "n": n, "k": k,
                           "sustain_ms": args.sustain_ms}
                    try:
                        row["bf16_s"] = sustained_time(bf16)
                        row["fp8_fast_s"] = sustained_time(fp8(True))
                    except Exception as exc:
                        row["error"] = failure(exc)
                    keep(row)
                    del bf16, fp8
    section("gemm_grid", gemm_grid)

    # --- grouped expert GEMMs -------------------------------------------------------------
    def grouped():
        models = {"qwen3-30b-a3b": (2048, 768), "gpt-oss": (2880, 2880), "deepseek-v3": (7168, 2048),
                  "mixtral-8x7b": (4096, 14336)}
        tokens_per_expert = (16, 64, 256, 1024, 4096)
        experts = (8, 32)
        if args.quick:
            tokens_per_expert, experts = (256, 4096), (8,)
        for model, (hidden, ffn) in models.items():
            for e in experts:
                for t in tokens_per_expert:
                    total = e * t
                    x = torch.randn(total, hidden, device=dev, dtype=torch.bfloat16)
                    w1 = torch.randn(e, 2 * ffn, hidden, device=dev, dtype=torch.bfloat16)  # gated fc1
                    offs = torch.arange(1, e + 1, device=dev, dtype=torch.int32) * t
                    flops = 2 * total * 2 * ffn * hidden
                    row = {"section": "grouped", "model": model, "hidden": hidden, "ffn": ffn,
                           "experts": e, "tokens_per_expert": t}
                    try:
                        s = timed(lambda: torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs))
                        row["grouped_mm_tflops"] = flops / s / 1e12
                        row["grouped_mm_s"] = s
                    except Exception as exc:
                        row["grouped_mm_error"] = str(exc)[:200]
                    chunks = x.split(t)

                    def loop():
                        for i in range(e):
                            torch.mm(chunks[i], w1[i].t())
                    s = timed(loop)
                    row["loop_mm_tflops"] = flops / s / 1e12
                    row["loop_mm_s"] = s
                    keep(row)
                    del x, w1
    section("grouped", grouped)

    def grouped_streams():
        # Transformer Engine's grouped linear on Hopper (general_grouped_gemm ->
        # nvte_multi_tensor_gemm, transformer_engine/common/gemm/cublaslt_gemm.cu @d0067d0d): one
        # cuBLAS GEMM per local expert, expert i on compute stream i % 4 (multi_stream.cpp:
        # num_compute_streams = 4), so at most 4 experts' tiles share the GPU at once. Timed as
        # that (4 streams), one stream, and torch._grouped_mm (one kernel for all experts:
        # torchtitan's), for the expert forward ([t x h] @ [h x 2f], gated fc1) and its weight
        # gradient ([2f x t] @ [t x h], reducing over the expert's t tokens). Kernel time from
        # CUDA-graph replays.
        models = {"qwen3-30b-a3b": (2048, 768), "gpt-oss": (2880, 2880),
                  "deepseek-v3": (7168, 2048), "mixtral-8x7b": (4096, 14336)}
        tokens_per_expert = (128, 256, 512, 1024, 2048, 4096)
        experts = (4, 8, 16, 32)
        if args.quick:
            tokens_per_expert, experts = (256, 4096), (8,)
        streams = [torch.cuda.Stream() for _ in range(4)]

        def graph_time(fn, n=5):
            return timed(captured(fn, n).replay, reps=5, warmup=2) / n

        def on_streams(pairs, count):
            main = torch.cuda.current_stream()
            for st in streams[:count]:
                st.wait_stream(main)
            for i, (a, b) in enumerate(pairs):
                with torch.cuda.stream(streams[i % count]):
                    torch.mm(a, b)
            for st in streams[:count]:
                main.wait_stream(st)

        for model, (hidden, ffn) in models.items():
            for e in experts:
                for t in tokens_per_expert:
                    row = {"section": "grouped_streams", "model": model, "hidden": hidden,
                           "ffn": ffn, "experts": e, "tokens_per_expert": t}
                    x = w = dy = None
                    try:
                        x = torch.randn(e * t, hidden, device=dev, dtype=torch.bfloat16)
                        w = torch.randn(e, 2 * ffn, hidden, device=dev, dtype=torch.bfloat16)
                        dy = torch.randn(e * t, 2 * ffn, device=dev, dtype=torch.bfloat16)
                        xs, dys = x.split(t), dy.split(t)
                        offs = torch.arange(1, e + 1, device=dev, dtype=torch.int32) * t
                        fwd = [(xs[i], w[i].t()) for i in range(e)]
                        wgrad = [(dys[i].t(), xs[i]) for i in range(e)]
                        for name, pairs in (("fwd", fwd), ("wgrad", wgrad)):
                            for count in (4, 1):
                                row[f"{name}_streams{count}_s"] = graph_time(
                                    lambda: on_streams(pairs, count))
                        row["fwd_grouped_mm_s"] = graph_time(
                            lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
                    except Exception as exc:
                        row["error"] = failure(exc)
                    keep(row)
                    del x, w, dy
    section("grouped_streams", grouped_streams)

    # --- optimizer, gradient norm, zero ---------------------------------------------------
    def optimizer():
        total = 1_000_000_000 if not args.quick else 100_000_000
        sizes = [total // 200] * 200
        params = [torch.randn(n, device=dev, dtype=torch.float32, requires_grad=True) for n in sizes]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
        opt.step()                                  # creates exp_avg, exp_avg_sq
        s = timed(opt.step, reps=5)
        grads = [p.grad for p in params]
        rows.append({"section": "optimizer", "kind": "adamw_fused_fp32", "params": total, "s": s,
                     "gb_per_s_at_28_bytes": 28 * total / s / 1e9})
        s = timed(lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0))), reps=5)
        rows.append({"section": "optimizer", "kind": "foreach_norm_fp32", "params": total, "s": s,
                     "gb_per_s_read": 4 * total / s / 1e9})
        s = timed(lambda: torch._foreach_mul_(grads, 0.5), reps=5)
        rows.append({"section": "optimizer", "kind": "foreach_scale_fp32", "params": total, "s": s,
                     "gb_per_s_read_plus_write": 8 * total / s / 1e9})
        flat = torch.empty(total, device=dev, dtype=torch.float32)
        s = timed(flat.zero_, reps=5)
        rows.append({"section": "optimizer", "kind": "zero_fp32", "params": total, "s": s,
                     "gb_per_s_write": 4 * total / s / 1e9})
        for r in rows[-4:]:
            print(json.dumps(r), flush=True)
    section("optimizer", optimizer)

    # --- host launch time -------------------------------------------------------------------
    def launches():
        x = torch.zeros(1024, device=dev)
        n = 2000

        def many():
            for _ in range(n):
                x.add_(1.0)
        many()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        many()
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / n
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            many()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            many()
        graph.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        replay = (time.perf_counter() - t0) / n
        rows.append({"section": "launch", "eager_s_per_kernel": eager, "graph_s_per_kernel": replay})
        print(json.dumps(rows[-1]), flush=True)
    section("launch", launches)


    # --- the MoE token path's kernels and the dispatcher's host sync ------------------------
    def moe():
        # The GPU idle time one device-to-host sync adds: a chain of GEMMs (~100 us each) with
        # and without copying a small count tensor to the host between them (what the alltoall
        # dispatcher does with its split sizes before the all-to-all).
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        counts = torch.randint(0, 100, (128,), device=dev)
        n = 200

        def chain(sync):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                a @ b
                if sync:
                    counts.cpu()            # a D2H copy queued after the GEMM: the host waits
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n
        chain(False), chain(True)
        plain = statistics.median(chain(False) for _ in range(5))
        synced = statistics.median(chain(True) for _ in range(5))

        def chain_small(sync):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                counts.add_(1)              # a launch-bound loop: the GPU idles anyway
                if sync:
                    counts.cpu()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n
        rows.append({"section": "moe", "kind": "d2h_sync", "gemm_chain_s": plain,
                     "gemm_chain_synced_s": synced, "sync_cost_s": synced - plain,
                     "small_kernel_s": statistics.median(chain_small(False) for _ in range(5)),
                     "small_kernel_synced_s": statistics.median(chain_small(True)
                                                                for _ in range(5))})
        print(json.dumps(rows[-1]), flush=True)
        # Router, permutation and unpermutation at the shapes of Qwen3-30B-A3B (h 2048, 128
        # experts, top 8) and GPT-OSS-120B (h 2880, 128 experts, top 4), 4096 and 16384 tokens.
        for model, hidden, experts, top_k in (("qwen3-30b-a3b", 2048, 128, 8),
                                              ("gpt-oss-120b", 2880, 128, 4)):
            for tokens in (4096, 16384):
                x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16)
                w = torch.randn(experts, hidden, device=dev, dtype=torch.bfloat16)

                def route():
                    logits = (x @ w.t()).float()
                    scores = torch.softmax(logits, dim=-1)
                    probs, idx = torch.topk(scores, top_k, dim=-1)
                    routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter(1, idx, True)
                    weights = torch.zeros_like(logits).scatter(1, idx, probs)
                    return routing_map, weights
                s_route = timed(route)
                routing_map, weights = route()

                def permute():
                    # Megatron-Core moe_utils.permute: token indices per expert, then gather.
                    token_idx = routing_map.t().contiguous().nonzero()[:, 1]
                    return x.index_select(0, token_idx), token_idx
                s_perm = timed(permute)
                permuted, token_idx = permute()
                pair_w = weights.t().contiguous().masked_select(routing_map.t().contiguous())

                def unpermute():
                    out = torch.zeros_like(x)
                    out.index_add_(0, token_idx, permuted * pair_w.to(permuted.dtype)[:, None])
                    return out
                s_unperm = timed(unpermute)
                pairs = tokens * top_k
                rows.append({"section": "moe", "kind": "token_path", "model": model,
                             "tokens": tokens, "hidden": hidden, "experts": experts,
                             "top_k": top_k, "router_s": s_route, "permute_s": s_perm,
                             "unpermute_s": s_unperm,
                             "permute_gb_per_s": 2 * 2 * pairs * hidden / s_perm / 1e9,
                             "unpermute_gb_per_s": 2 * 2 * pairs * hidden / s_unperm / 1e9})
                print(json.dumps(rows[-1]), flush=True)
    section("moe", moe)

    # --- cuDNN attention as Transformer Engine builds it: sinks, sliding windows ------------
    def cudnn_graph_attention():
        # Needs the cuDNN frontend's Python package (pip install nvidia-cudnn-frontend==1.22.0,
        # the first with sink_token in its bindings); it loads the cuDNN PyTorch ships.
        torch.backends.cudnn.version()
        import cudnn
        meta["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
        meta["cudnn_backend"] = cudnn.backend_version()
        handle = cudnn.create_handle()
        bf16, fp32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT

        def bhsd(t):          # (b, s, h, d) storage seen as (b, h, s, d): TE's bshd layout
            return t.permute(0, 2, 1, 3)

        def pairs(seq, left):  # (query, key) pairs a causal band of `left` keys attends
            if left is None:
                return seq * (seq + 1) / 2
            return sum(min(i + 1, left) for i in range(seq))

        def graph():
            return cudnn.pygraph(io_data_type=bf16, intermediate_data_type=fp32,
                                 compute_data_type=fp32, handle=handle)

        def build(g):
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
            return torch.empty(g.get_workspace_size(), device=dev, dtype=torch.uint8)

        # (name, batch, query heads, kv heads, head dim, seq): GPT-OSS (mb 1 and 4) and a
        # Llama-like MHA shape that torch's cuDNN SDPA rows above also time.
        # The sink's cost against heads and length: GPT-OSS's head dim at 8-32 heads and 16K.
        shapes = [("gpt-oss", 1, 64, 8, 64, 4096), ("gpt-oss", 4, 64, 8, 64, 4096),
                  ("llama-mha", 8, 32, 32, 128, 4096), ("llama-gqa", 2, 32, 8, 128, 8192),
                  ("heads8", 1, 8, 8, 64, 4096), ("heads16", 1, 16, 8, 64, 4096),
                  ("heads32", 1, 32, 8, 64, 4096), ("gpt-oss-16k", 1, 64, 8, 64, 16384)]
        variants = [("causal", None, False), ("causal+sink", None, True),
                    ("window128", 128, False), ("window128+sink", 128, True)]
        for name, b, hq, hkv, d, seq in shapes:
            q = torch.randn(b, seq, hq, d, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, seq, hkv, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, seq, hkv, d, device=dev, dtype=torch.bfloat16)
            o = torch.empty_like(q)
            do = torch.randn_like(q)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            stats = torch.empty(b, hq, seq, 1, device=dev, dtype=torch.float32)
            sink = torch.randn(1, hq, 1, 1, device=dev, dtype=torch.float32)
            dsink = torch.zeros(1, hq, 1, 1, device=dev, dtype=torch.float32)
            scale = d ** -0.5
            for variant, left, with_sink in variants:
                row = {"section": "cudnn", "shape": name, "batch": b, "heads": hq,
                       "kv_heads": hkv, "head_dim": d, "seq": seq, "variant": variant,
                       "window": left, "sink": with_sink}
                mask = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                            diagonal_band_right_bound=0)
                if left is not None:
                    mask["diagonal_band_left_bound"] = left
                try:
                    g = graph()
                    tq, tk, tv = (g.tensor_like(bhsd(t)) for t in (q, k, v))
                    extra = {}
                    if with_sink:
                        ts = g.tensor_like(sink)
                        extra["sink_token"] = ts
                    to, tst = g.sdpa(name="fwd", q=tq, k=tk, v=tv, generate_stats=True,
                                     attn_scale=scale, **mask, **extra)
                    to.set_output(True).set_dim(list(bhsd(o).shape)).set_stride(
                        list(bhsd(o).stride())).set_data_type(bf16)
                    tst.set_output(True).set_data_type(fp32)
                    ws = build(g)
                    pack = {tq: bhsd(q), tk: bhsd(k), tv: bhsd(v), to: bhsd(o), tst: stats}
                    if with_sink:
                        pack[ts] = sink
                    s_fwd = timed(lambda: g.execute(pack, ws, handle=handle))

                    g2 = graph()
                    bq, bk, bv, bo, bdo = (g2.tensor_like(bhsd(t)) for t in (q, k, v, o, do))
                    bst = g2.tensor_like(stats)
                    extra = {}
                    if with_sink:
                        bs, bds = g2.tensor_like(sink), g2.tensor_like(dsink)
                        extra = {"sink_token": bs, "dSink_token": bds}
                    tdq, tdk, tdv = g2.sdpa_backward(name="bwd", q=bq, k=bk, v=bv, o=bo,
                                                     dO=bdo, stats=bst, attn_scale=scale,
                                                     **mask, **extra)
                    for t, ref in ((tdq, dq), (tdk, dk), (tdv, dv)):
                        t.set_output(True).set_dim(list(bhsd(ref).shape)).set_stride(
                            list(bhsd(ref).stride())).set_data_type(bf16)
                    if with_sink:
                        bds.set_output(True)
                    ws2 = build(g2)
                    pack2 = {bq: bhsd(q), bk: bhsd(k), bv: bhsd(v), bo: bhsd(o), bdo: bhsd(do),
                             bst: stats, tdq: bhsd(dq), tdk: bhsd(dk), tdv: bhsd(dv)}
                    if with_sink:
                        pack2.update({bs: sink, bds: dsink})
                    s_bwd = timed(lambda: g2.execute(pack2, ws2, handle=handle))
                except Exception as exc:
                    row["error"] = failure(exc)
                    keep(row)
                    continue
                fwd_flops = 4 * pairs(seq, left) * d * hq * b
                row.update({"fwd_s": s_fwd, "bwd_s": s_bwd,
                            "fwd_tflops": fwd_flops / s_fwd / 1e12,
                            "bwd_tflops": 2.5 * fwd_flops / s_bwd / 1e12})
                keep(row)
            del q, k, v, o, do, dq, dk, dv, stats

        # GPT-OSS's biased expert GEMMs: cuBLASLt's bias epilogue (torch.addmm) against the
        # plain GEMM, and the bias gradient (a column sum of the output gradient).
        for tokens in (4096, 32768):
            x = torch.randn(tokens, 2880, device=dev, dtype=torch.bfloat16)
            w = torch.randn(5760, 2880, device=dev, dtype=torch.bfloat16)
            bias = torch.randn(5760, device=dev, dtype=torch.bfloat16)
            gy = torch.randn(tokens, 5760, device=dev, dtype=torch.bfloat16)
            flops = 2 * tokens * 5760 * 2880
            s_mm = timed(lambda: x @ w.t())
            s_bias = timed(lambda: torch.addmm(bias, x, w.t()))
            s_dbias = timed(lambda: gy.sum(0))
            rows.append({"section": "cudnn", "shape": "gpt-oss-fc1-bias", "tokens": tokens,
                         "mm_tflops": flops / s_mm / 1e12, "addmm_tflops": flops / s_bias / 1e12,
                         "dbias_s": s_dbias, "mm_s": s_mm})
            print(json.dumps(rows[-1]), flush=True)
    section("cudnn", cudnn_graph_attention)

    # --- eager PyTorch ops against torch.compile: a Llama block's memory-bound parts --------
    def eager_vs_compiled():
        # torchtitan's Llama at 4d88a8a44 (models/norms.py RMSNorm, models/llama/model.py
        # apply_rotary_emb, repeat_kv, FeedForward's silu product), Llama 3 8B shapes, micro-batch
        # 2 of 8,192 tokens; bench/torch_elementwise.py counts the bytes of the same ops.
        import torch.nn.functional as F
        b, s, h, a, a_kv, d, f = 2, 8192, 4096, 32, 8, 128, 14336
        bf16 = torch.bfloat16
        weight = torch.ones(h, device=dev, dtype=bf16, requires_grad=True)
        angles = (torch.arange(s, device=dev)[:, None]
                  * (1.0 / 500000 ** (torch.arange(0, d, 2, device=dev) / d))[None])
        freqs = torch.polar(torch.ones_like(angles), angles).view(1, s, 1, d // 2)

        def rmsnorm(x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

        def rotary(q, k):
            q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
            k_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
            return (torch.view_as_real(q_ * freqs).flatten(3).type_as(q),
                    torch.view_as_real(k_ * freqs).flatten(3).type_as(k))

        def swiglu(g, u):
            return F.silu(g) * u

        def leaf(*shape):
            return torch.randn(*shape, device=dev, dtype=bf16, requires_grad=True)

        cases = [("rmsnorm", rmsnorm, lambda: [leaf(b, s, h)], b * s * h),
                 ("rotary", rotary, lambda: [leaf(b, s, a, d), leaf(b, s, a_kv, d)],
                  b * s * (a + a_kv) * d),
                 ("swiglu", swiglu, lambda: [leaf(b, s, f), leaf(b, s, f)], b * s * f)]
        for name, fn, make, elements in cases:
            inputs = make()
            row = {"section": "eager", "op": name, "elements": elements,
                   "shape": {"b": b, "s": s, "h": h, "heads": a, "kv_heads": a_kv,
                             "head_dim": d, "ffn": f}}
            for mode in ("eager", "compiled"):
                try:
                    run = fn if mode == "eager" else torch.compile(fn)
                    outs = run(*inputs)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    grads = [torch.randn_like(o) for o in outs]
                    leaves = [*inputs, weight] if name == "rmsnorm" else inputs

                    def forward():
                        return run(*inputs)

                    def forward_backward():
                        out = run(*inputs)
                        out = out if isinstance(out, tuple) else (out,)
                        torch.autograd.grad(out, leaves, grads)
                    row[f"{mode}_fwd_s"] = timed(forward)
                    row[f"{mode}_fwd_bwd_s"] = timed(forward_backward)
                except Exception as exc:
                    row[f"{mode}_error"] = failure(exc)
            keep(row)
        # The HBM rate a plain streaming kernel reaches here: one bf16 copy of 1 GiB.
        x = torch.empty(2**29, device=dev, dtype=bf16)
        y = torch.empty_like(x)
        s_copy = timed(lambda: y.copy_(x))
        rows.append({"section": "eager", "op": "copy_1GiB", "s": s_copy,
                     "gb_per_s_read_plus_write": 2 * x.numel() * 2 / s_copy / 1e9})
        print(json.dumps(rows[-1]), flush=True)
    section("eager", eager_vs_compiled)

    # --- one rank's share of PyTorch's ring attention (torchtitan's context parallelism) ---
    def ring():
        # torch/distributed/tensor/experimental/_attention.py (the load-balanced ring that
        # torchtitan's CP runs): rank r holds two chunks of c tokens (head and tail); step 0 is
        # causal attention over its own 2c keys, a later step attends its 2c queries to the
        # first c keys it receives (i <= r) or its last c queries to all 2c (i > r), each
        # merged into an fp32 output and log-sum-exp by eager ops (_SDPAMerger: sigmoid and
        # logsigmoid of the LSE difference; a merge into the tail half rebuilds the whole
        # tensor with torch.cat). The backward adds each step's fp32 gradients the same way.
        # No communication here: this times the work of one rank, to set against cp x the
        # step-0 kernel. Llama 3.1 8B shapes: 32 heads (KV repeated), d 128, c = 16K.
        import torch.nn.functional as F
        aten = torch.ops.aten
        heads, d, c = 32, 128, 16384
        q, k, v, g = (torch.randn(1, heads, 2 * c, d, device=dev, dtype=torch.bfloat16)
                      for _ in range(4))

        def steps(cp, rank):
            for i in range(cp):
                if i == 0:
                    yield q, k, v, False, True
                elif i <= rank:
                    yield q, k[:, :, :c], v[:, :, :c], False, False
                else:
                    yield q[:, :, c:], k, v, True, False

        def tail_update(whole, part):      # replace the tail half, as _partial_update does
            return torch.cat([whole[:, :, :c], part], dim=2)

        def forward(cp, rank, merge):
            out = lse = None
            saved = []
            for qi, ki, vi, partial, causal in steps(cp, rank):
                o, l, *rest = aten._scaled_dot_product_flash_attention(qi, ki, vi, 0.0, causal)
                saved.append((qi, ki, vi, o, l, rest, causal))
                if not merge:
                    continue
                o, l = o.float(), l.float().unsqueeze(-1)
                if out is None:
                    out, lse = o, l
                    continue
                cur_o = out[:, :, c:] if partial else out
                cur_l = lse[:, :, c:] if partial else lse
                new_o = cur_o - torch.sigmoid(l - cur_l) * (cur_o - o)
                new_l = cur_l - F.logsigmoid(cur_l - l)
                out, lse = ((tail_update(out, new_o), tail_update(lse, new_l)) if partial
                            else (new_o, new_l))
            if merge:
                out = out.to(torch.bfloat16)
            return saved

        def backward(saved, merge):
            gq = torch.zeros(1, heads, 2 * c, d, device=dev, dtype=torch.float32)
            gk = torch.zeros_like(gq)
            gv = torch.zeros_like(gq)
            for qi, ki, vi, o, l, rest, causal in saved:
                cq, ck, mq, mk, seed, offset = rest[:6]
                dout = g[:, :, -qi.shape[2]:]
                dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
                    dout, qi, ki, vi, o, l, cq, ck, mq, mk, 0.0, causal, seed, offset)
                if not merge:
                    continue
                if qi.shape[2] == c:                       # tail queries: rebuild grad_q
                    gq = tail_update(gq, gq[:, :, c:] + dq)
                else:
                    gq += dq
                if ki.shape[2] == c:                       # head keys: rebuild grad_k, grad_v
                    gk = torch.cat([gk[:, :, :c] + dk, gk[:, :, c:]], dim=2)
                    gv = torch.cat([gv[:, :, :c] + dv, gv[:, :, c:]], dim=2)
                else:
                    gk += dk
                    gv += dv
            if merge:
                gq.to(torch.bfloat16), gk.to(torch.bfloat16), gv.to(torch.bfloat16)

        for cp in (1, 2, 4, 8):
            rank = cp // 2
            row = {"section": "ring", "cp": cp, "rank": rank, "heads": heads, "head_dim": d,
                   "chunk_tokens": c, "causal_pairs_units": 2 * cp}
            for merge in (False, True):
                key = "merged" if merge else "kernels"
                try:
                    row[f"{key}_fwd_s"] = timed(lambda: forward(cp, rank, merge), reps=5)
                    saved = forward(cp, rank, False)
                    row[f"{key}_bwd_s"] = timed(lambda: backward(saved, merge), reps=5)
                    del saved
                except Exception as exc:
                    row[f"{key}_error"] = failure(exc)
            keep(row)
    section("ring", ring)

    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
