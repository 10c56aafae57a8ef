"""bench/data/xla_matmul_perf_table.yaml: OpenXLA's default GEMM performance table (measured
TFLOP/s per GEMM shape and dtype, sm_90 and sm_100) is well-formed, and a few values are pinned
to the headers they were parsed from."""
from itertools import product
from pathlib import Path

import pytest
import yaml

FILE = Path(__file__).resolve().parents[2] / "bench" / "data" / "xla_matmul_perf_table.yaml"
DTYPES = {"bf16", "f32", "fp8_e4m3", "fp8_e4m3_e5m2", "fp8_e5m2_e4m3"}
DIMS = (256, 512, 1024, 2048, 4096)
GRID = set(product((1, 2, 4), DIMS, DIMS, DIMS))        # b, m, n, k: 375 GEMMs per table


@pytest.fixture(scope="module")
def data() -> dict:
    return yaml.safe_load(FILE.read_text())


def _table(data: dict, file: str, arch: str) -> dict[tuple[int, int, int, int], dict]:
    (table,) = [t for t in data["tables"] if t["file"] == file and t["arch"] == arch]
    return {(e["b"], e["m"], e["n"], e["k"]): e for e in table["entries"]}


def test_source_block(data):
    source = data["source"]
    assert source["key"] == "xla_matmul_perf_table"
    assert {"title", "url", "where", "notes", "files"} <= set(source)
    for f in source["files"].values():
        assert len(f["commit"]) == 40 and f["commit"] in f["url"] and f["path"] in f["url"]
    assert data["runs"] == []           # bench/published.py reads every bench/data file's runs


def test_every_entry_is_well_formed(data):
    files = data["source"]["files"]
    assert [(t["file"], t["arch"]) for t in data["tables"]] == [
        ("xla-2025-10-21", "sm_100"), ("xla-2025-10-21", "sm_90"),
        ("xla-2025-08-14", "sm_90"), ("xla-2025-08-14", "sm_100"), ("xla-2025-05-28", "sm_90")]
    for table in data["tables"]:
        dtypes = set(files[table["file"]]["archs"][table["arch"]])
        assert "bf16" in dtypes and dtypes <= DTYPES
        shapes = []
        for e in table["entries"]:
            for dim in "bmnk":
                assert type(e[dim]) is int and e[dim] > 0, e
            assert set(e) - set("bmnk") == dtypes, e
            for dtype in dtypes:
                assert type(e[dtype]) is float and e[dtype] > 0, e
            shapes.append((e["b"], e["m"], e["n"], e["k"]))
        assert len(shapes) == len(set(shapes)) == 375 and set(shapes) == GRID, table["file"]


def test_pinned_values(data):
    # sm_90 bf16 at b=1, 4096^3: 780193877565849, 783328793548203 and 786048187408492 FLOP/s.
    assert _table(data, "xla-2025-10-21", "sm_90")[(1, 4096, 4096, 4096)]["bf16"] == 780.2
    assert _table(data, "xla-2025-08-14", "sm_90")[(1, 4096, 4096, 4096)]["bf16"] == 783.3
    assert _table(data, "xla-2025-05-28", "sm_90")[(1, 4096, 4096, 4096)]["bf16"] == 786.0
    # sm_100 (B200-class) at b=1, 4096^3: bf16 1416867213789406, FP8 e4m3 2764981863158106 FLOP/s.
    b200 = _table(data, "xla-2025-10-21", "sm_100")[(1, 4096, 4096, 4096)]
    assert (b200["bf16"], b200["fp8_e4m3"]) == (1416.9, 2765.0)
    # The first entry of the 2025-10-21 header (sm_100, 256^3): bf16 6765006451612 FLOP/s.
    assert _table(data, "xla-2025-10-21", "sm_100")[(1, 256, 256, 256)]["bf16"] == 6.8
