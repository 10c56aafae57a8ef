"""The planner: choose data, tensor and pipeline parallelism for large-model training."""

import os as _os

# One BLAS thread, set before numpy loads. The cost models multiply small matrices (thousands
# of candidates by tens of block types), where OpenBLAS's threads cost far more than they give
# (3,204 x 6 by 6 x 32: 0.1 ms on one thread, 1.7 ms on two of a busy 2-core machine; the
# deepseek-v3 search on 1,024 H100 took 20.6 s instead of 13.5 s), and a threaded BLAS may sum
# in an order that depends on the machine's core count: same input, same bytes, anywhere.
for _name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ[_name] = "1"

__version__ = "0.1.0"
