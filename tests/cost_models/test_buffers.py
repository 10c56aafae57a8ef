"""Framework buffers outside the model's tensors: DeepSpeed's ZeRO buckets
(deepspeed/runtime/zero/config.py defaults), HCCL's per-communicator buffers, DeepSpeed's bf16
gradient copy (runtime/engine.py, runtime/bf16_optimizer.py)."""

import numpy as np
import pytest

from cost_models.memory import bf16_grad_copy_bytes_per_param, framework_buffer_bytes

DEEPSPEED = dict(grad_bucket_elements=5e8, grad_bucket_copies=2, gather_bucket_elements=5e8,
                 per_communicator_bytes=0.0)
HCCL = dict(grad_bucket_elements=0.0, grad_bucket_copies=1, gather_bucket_elements=0.0,
            per_communicator_bytes=2 * 200e6)


def test_deepspeed_default_buckets():
    # reduce_bucket_size = allgather_bucket_size = 5e8 elements (DeepSpeedZeroConfig), the
    # reduce bucket twice with overlap_comm: 3 x 5e8 bf16 values for ZeRO-1/2.
    got = framework_buffer_bytes(data_parallel=np.array([True]), zero_stage=np.array([1]),
                                 tp=1, pp=1, cp=1, value_bytes=2, **DEEPSPEED)
    assert got[0] == pytest.approx(3 * 5e8 * 2)
    # ZeRO-3 gathers into its prefetch buffers instead; no data parallelism, no buckets.
    z3 = framework_buffer_bytes(data_parallel=np.array([True, False]), zero_stage=np.array([3, 1]),
                                tp=1, pp=1, cp=1, value_bytes=2, **DEEPSPEED)
    np.testing.assert_allclose(z3, [2 * 5e8 * 2, 0.0])


def test_hccl_buffers_per_communicator():
    # HCCL_BUFFSIZE 200 MB, two buffers, for each of tp, pp, dp with more than one rank.
    got = framework_buffer_bytes(data_parallel=np.array([True]), zero_stage=np.array([0]),
                                 tp=np.array([8]), pp=np.array([4]), cp=np.array([1]),
                                 value_bytes=2, **HCCL)
    assert got[0] == pytest.approx(3 * 400e6)


def test_bf16_gradient_copy_where_deepspeed_runs_bf16_optimizer():
    zero = np.array([0, 1, 1, 2])
    pp = np.array([1, 1, 4, 4])
    got = bf16_grad_copy_bytes_per_param(bf16=True, zero_stage=zero, pp=pp,
                                         copy_bytes_per_param=2)
    np.testing.assert_allclose(got, [2, 0, 2, 0])
    assert not bf16_grad_copy_bytes_per_param(bf16=False, zero_stage=zero, pp=pp,
                                              copy_bytes_per_param=2).any()
