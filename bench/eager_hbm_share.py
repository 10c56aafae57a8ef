"""The share of HBM bandwidth a GPU's memory-bound training ops reach, from measured kernels.

    python bench/eager_hbm_share.py bench/data/kernels_h100_eager.json bench/data/kernels_h200_eager.json

Input: the `eager` rows of bench/device_kernels.py (torchtitan's eager RMSNorm, rotary
embedding and SwiGLU product, Llama 3 8B shapes, forward and backward). Each pass moves the
bytes `cost_models.compute.EAGER_BYTES_PER_ELEMENT` counts for it (what PyTorch dispatches,
bench/torch_elementwise.py); bytes / time / the preset's datasheet bandwidth is the pass's
share. The mean over the six passes is the `hbm_fraction` a preset takes (`share()`); a plain
copy is printed beside it as the upper bound a streaming kernel reaches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import EAGER_BYTES_PER_ELEMENT  # noqa: E402
from planner.inputs.loader import load_cluster  # noqa: E402

PRESET_OF_GPU = {"NVIDIA H100 80GB HBM3": "dgx-h100", "NVIDIA H200": "dgx-h200"}
"""The preset whose datasheet bandwidth a measured GPU is set against."""


def passes(path: Path) -> tuple[str, float, list[tuple[str, str, float]]]:
    """(preset name, datasheet GB/s, [(op, 'forward' | 'backward', GB/s reached)])."""
    data = json.loads(path.read_text())
    preset = load_cluster(PRESET_OF_GPU[data["meta"]["gpu"]])
    out = []
    for row in data["rows"]:
        if row.get("section") != "eager" or row.get("op") not in EAGER_BYTES_PER_ELEMENT:
            continue
        forward, backward = EAGER_BYTES_PER_ELEMENT[row["op"]]
        fwd_s = row["eager_fwd_s"]
        bwd_s = row["eager_fwd_bwd_s"] - fwd_s
        out.append((row["op"], "forward", forward * row["elements"] / fwd_s / 1e9))
        out.append((row["op"], "backward", backward * row["elements"] / bwd_s / 1e9))
    return preset.name, preset.gpu.hbm_gb_per_s, out


def share(path: Path) -> float:
    """Mean share of the datasheet bandwidth over the file's eager passes."""
    _, datasheet, measured = passes(path)
    return sum(gb / datasheet for *_, gb in measured) / len(measured)


def main() -> None:
    for name in sys.argv[1:] or ["bench/data/kernels_h100_eager.json",
                                 "bench/data/kernels_h200_eager.json"]:
        path = Path(name)
        preset, datasheet, measured = passes(path)
        print(f"{path.name}: against {preset}'s {datasheet:.0f} GB/s")
        for op, direction, gb in measured:
            print(f"  {op:8s} {direction:8s} {gb:6.0f} GB/s  {gb / datasheet:.2f}")
        copy = [r for r in json.loads(path.read_text())["rows"] if r.get("op") == "copy_1GiB"]
        if copy:
            print(f"  copy     1 GiB    {copy[0]['gb_per_s_read_plus_write']:6.0f} GB/s  "
                  f"{copy[0]['gb_per_s_read_plus_write'] / datasheet:.2f}")
        print(f"  mean of the eager passes: {share(path):.3f} (the preset has "
              f"{load_cluster(preset).efficiency.hbm_fraction})")


if __name__ == "__main__":
    main()
