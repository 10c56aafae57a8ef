"""The peak memory of torchtitan's eager loss, counted on PyTorch's own op stream (not a unit
test; needs torch, CPU is enough).

    python bench/torch_loss_memory.py

torchtitan's loss (components/loss.py cross_entropy_loss @b5bcd76c6; train.py loss_fn
@9dec370) is F.cross_entropy(pred.float(), labels) on the output layer's bf16 logits, and the
training step deletes `pred` before the backward. This script makes bf16 logits of
(tokens, vocab), runs that loss and its backward under a TorchDispatchMode that follows every
storage the ops create until it is freed (torch.multiprocessing.reductions.StorageWeakRef),
and prints the live bytes at the peak and after the forward, per logit, next to
`cost_models.memory`'s: the kept fp32 log-probabilities (`output_activation_bytes`'s
4 s b V / t) plus `eager_cross_entropy_working_bytes`. The caching allocator on a GPU hands out
the same tensors for the same lifetimes.

With tensor parallelism torchtitan (until fec0c175d, 2026-06) ran the loss under DTensor's
loss_parallel, whose local ops a dispatch mode does not see. That one is measured as the
process's peak resident memory (Linux /proc/self/status VmHWM, reset through
/proc/self/clear_refs) over a larger loss on a one-rank gloo mesh: large tensors are mapped and
unmapped whole, so the resident bytes follow the live ones (the plain loss measured this way
gives the dispatch mode's 12.0). tests/golden/test_pytorch_measured.py pins the counts.

Hugging Face's loss (transformers loss/loss_utils.py ForCausalLMLoss: F.cross_entropy on
logits.float()) is measured the same way where transformers is installed (pip install
transformers), with the bf16 logits held by the model's CausalLMOutputWithPast through the
backward, as a training step's `outputs.loss.backward()` holds them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.memory import (eager_cross_entropy_working_bytes,  # noqa: E402
                                returned_logits_bytes)

TOKENS, VOCAB = 512, 4096


class LiveBytes(TorchDispatchMode):
    """The bytes of the storages the ops under it created and that are still alive; `peak`
    the most at once (each op's outputs counted while its inputs are alive)."""

    def __init__(self):
        super().__init__()
        self.alive: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    def live(self) -> int:
        self.alive = {k: v for k, v in self.alive.items() if not v[0].expired()}
        return sum(n for _, n in self.alive.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if type(t) is torch.Tensor:          # plain tensors (a DTensor's are its locals)
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in self.alive or self.alive[key][0].expired():
                    self.alive[key] = (StorageWeakRef(storage), storage.nbytes())
        self.peak = max(self.peak, self.live())
        return out


def _loss_bytes(loss_of, *, batch: tuple = ()) -> dict:
    """Bytes per logit alive after the forward and at the peak of forward and backward of
    `loss_of(logits, labels) -> (loss, held)` on (*batch, TOKENS, VOCAB) bf16 logits made under
    the mode (the output layer's), `held` what the training step keeps alive until the
    backward."""
    torch.manual_seed(0)
    hidden = torch.randn(*batch, TOKENS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (*batch, TOKENS))
    with LiveBytes() as mode:
        loss, held = loss_of(hidden * 1.0, labels)
        kept = mode.live()
        loss.backward()
        del held
    logits = TOKENS * VOCAB
    return {"kept_bytes_per_logit": kept / logits, "peak_bytes_per_logit": mode.peak / logits}


def loss_memory() -> dict:
    """torchtitan's eager loss: F.cross_entropy(pred.float(), labels), pred deleted before the
    backward (nothing held)."""
    return _loss_bytes(lambda pred, labels: (F.cross_entropy(pred.float(), labels), None))


def hf_loss_memory() -> dict | None:
    """Hugging Face's causal-LM loss, the model output holding the logits through the
    backward; None without transformers."""
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss
        from transformers.modeling_outputs import CausalLMOutputWithPast
    except ImportError:
        return None

    def loss_of(logits, labels):
        outputs = CausalLMOutputWithPast(
            loss=ForCausalLMLoss(logits=logits, labels=labels, vocab_size=VOCAB), logits=logits)
        return outputs.loss, outputs
    return _loss_bytes(loss_of, batch=(1,))


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def loss_parallel_memory(tokens: int = 2048, vocab: int = 32768) -> dict:
    """Bytes per logit of the loss under DTensor's loss_parallel (one rank: the whole
    vocabulary on it): resident after the forward and at the peak, over the resident bytes
    before it; the second of two runs (the first pays one-time allocations)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        hidden = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (tokens,))
        for _ in range(2):
            hidden.grad = None
            base = _status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")                     # VmHWM back to the current resident bytes
            pred = DTensor.from_local(hidden * 1.0, mesh, [Shard(1)])
            with loss_parallel():
                loss = F.cross_entropy(pred.float(), labels)
                del pred
                kept = _status("VmRSS") - base
                loss.backward()
            peak = _status("VmHWM") - base
    finally:
        dist.destroy_process_group()
    logits = tokens * vocab
    return {"kept_bytes_per_logit": round(kept / logits, 1),
            "peak_bytes_per_logit": round(peak / logits, 1)}


def main() -> None:
    argparse.ArgumentParser().parse_args()
    measured = loss_memory()
    kept_formula = 4.0                 # output_activation_bytes: fp32 logits, 4 s b V / t
    working = eager_cross_entropy_working_bytes(seq_len=TOKENS, micro_batch=1,
                                                vocab_size=VOCAB, tp=1) / (TOKENS * VOCAB)
    returned = returned_logits_bytes(seq_len=TOKENS, micro_batch=1, vocab_size=VOCAB,
                                     tp=1) / (TOKENS * VOCAB)
    parallel = eager_cross_entropy_working_bytes(seq_len=TOKENS, micro_batch=1,
                                                 vocab_size=VOCAB, tp=2) * 2 / (TOKENS * VOCAB)
    print(json.dumps({"torch": torch.__version__, "measured": measured,
                      "formula": {"kept_bytes_per_logit": kept_formula,
                                  "peak_bytes_per_logit": kept_formula + working},
                      "hugging_face_measured": hf_loss_memory(),
                      "hugging_face_formula": {
                          "kept_bytes_per_logit": kept_formula + returned,
                          "peak_bytes_per_logit": kept_formula + returned + working},
                      "loss_parallel_measured": loss_parallel_memory(),
                      "loss_parallel_formula": {"kept_bytes_per_logit": kept_formula,
                                                "peak_bytes_per_logit": kept_formula + parallel}},
                     indent=1))


if __name__ == "__main__":
    main()
