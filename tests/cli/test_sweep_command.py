"""`planner sweep`: the best plan per GPU count, scaling, cost, and the SVG plot."""

import json
import xml.etree.ElementTree as ET

import pytest

ARGS = ("sweep", "llama2-7b", "dgx-h100", "--tokens", "1T")


def test_each_row_is_the_plan_of_that_count(cli):
    code, out, _ = cli(*ARGS, "--gpus", "16,8,32", "--gpu-hour-price", "2", "--json")
    assert code == 0
    result = json.loads(out)
    rows = result["rows"]
    assert [r["gpus"] for r in rows] == [8, 16, 32]             # sorted, each once
    for r in rows:
        code, alone, _ = cli("plan", "llama2-7b", "dgx-h100", "--gpus", str(r["gpus"]),
                             "--tokens", "1T", "--top", "1", "--json")
        best = json.loads(alone)["plans"][0]
        assert r["plan"]["time"]["step_s"] == best["time"]["step_s"]
        t = r["plan"]["throughput"]
        assert t["cost_usd"] == pytest.approx(2 * t["gpu_hours"])      # GPU-hours x price
        assert t["gpu_hours"] == pytest.approx(t["time_to_train_s"] * r["gpus"] / 3600)
    # Strong-scaling efficiency: tokens/s per GPU over the smallest count's.
    per_gpu = [r["plan"]["throughput"]["tokens_per_s"] / r["gpus"] for r in rows]
    assert [r["scaling_efficiency"] for r in rows] == pytest.approx(
        [p / per_gpu[0] for p in per_gpu])
    assert rows[0]["scaling_efficiency"] == 1.0


def test_a_count_where_nothing_fits_is_a_row_with_the_reason(cli):
    code, out, _ = cli("sweep", "llama3-70b", "dgx-h100", "--gpus", "8,64", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["plan"] is None and "satisfies memory_fits" in rows[0]["error"]
    assert rows[1]["plan"] is not None and rows[1]["scaling_efficiency"] == 1.0
    code, out, _ = cli("sweep", "llama3-70b", "dgx-h100", "--gpus", "8,64")
    assert "none fits" in out and "8 GPUs: no strategy" in " ".join(out.split())


def test_each_count_carries_its_search_note(cli):
    # The search's note on one count (here 384 GPUs with a power-of-two batch: pp widened to
    # carry the 3) is that row's, in JSON and as one note line, not lost in the table.
    code, out, _ = cli("sweep", "bloom-176b", "dgx-a100-80gb", "--gpus", "256,384",
                       "--global-batch", "2048", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["note"] is None
    assert rows[1]["note"].startswith("no plan with pp a power of two on 384 GPUs")
    code, _, err = cli("sweep", "bloom-176b", "dgx-a100-80gb", "--gpus", "256,384",
                       "--global-batch", "2048")
    assert err.count("note: 384 GPUs: no plan with pp a power of two on 384 GPUs") == 1


NS = "{http://www.w3.org/2000/svg}"


def _by_class(root, tag: str, kind: str) -> list:
    return [e for e in root.iter(f"{NS}{tag}") if e.get("class") == kind]


def test_plot_is_an_svg_of_throughput_efficiency_time_and_cost(cli, tmp_path):
    path = tmp_path / "sweep.svg"
    code, _, err = cli(*ARGS, "--gpus", "8,16,32", "--gpu-hour-price", "2", "--plot",
                       str(path))
    assert code == 0 and f"wrote {path}" in err
    svg = ET.parse(path).getroot()
    texts = [t.text for t in svg.iter(f"{NS}text")]
    for title in ("Throughput", "Scaling efficiency", "Time to train", "Cost to train"):
        assert title in texts
    # Every axis says what it is and in which unit.
    assert texts.count("GPUs (log scale)") == 4
    assert {t.text for t in _by_class(svg, "text", "ylabel")} == {
        "tokens/s (log scale)", "tokens/s per GPU vs. first (%)", "days (log scale)", "USD"}
    assert any(t.text.endswith("%") for t in _by_class(svg, "text", "ytick"))
    series = _by_class(svg, "polyline", "series")
    assert len(series) == 4 and all(len(p.get("points").split()) == 3 for p in series)
    # Ideal scaling: throughput and time to train (lines), efficiency (100%).
    assert len(_by_class(svg, "polyline", "ideal")) == 2
    assert len(_by_class(svg, "line", "ideal")) == 1
    assert path.read_bytes() == _rerun(cli, tmp_path, "--gpu-hour-price", "2")


def _rerun(cli, tmp_path, *extra) -> bytes:
    again = tmp_path / "again.svg"
    cli(*ARGS, "--gpus", "8,16,32", *extra, "--plot", str(again))
    return again.read_bytes()


def test_plot_without_tokens_has_no_time_to_train_panel(cli, tmp_path):
    path = tmp_path / "sweep.svg"
    code, _, _ = cli(*ARGS[:3], "--gpus", "8,16", "--plot", str(path))
    assert code == 0
    texts = [t.text for t in ET.parse(path).getroot().iter(f"{NS}text")]
    assert "Throughput" in texts and "Scaling efficiency" in texts
    assert "Time to train" not in texts and "Cost to train" not in texts


def _row(gpus: int, tokens_per_s: float | None, efficiency: float | None = None):
    from types import SimpleNamespace

    from planner.search.sweep import SweepRow

    if tokens_per_s is None:
        return SweepRow(gpus, None, "nothing fits")
    throughput = SimpleNamespace(tokens_per_s=tokens_per_s, time_to_train_s=1e12 / tokens_per_s,
                                 cost_usd=None)
    return SweepRow(gpus, SimpleNamespace(throughput=throughput), None, efficiency)


def test_ideal_scaling_runs_from_the_first_count_with_a_plan():
    from planner.cli.plot import sweep_panels, sweep_svg

    rows = [_row(8, None), _row(16, 1000.0, 1.0), _row(32, 1800.0, 0.9), _row(64, 3000.0, 0.75)]
    throughput, efficiency, train = sweep_panels(rows)
    assert throughput.ideal == [None, 1000.0, 2000.0, 4000.0]      # none before the first plan
    assert throughput.log_y and train.log_y and efficiency.percent
    first = train.values[1]
    assert train.ideal[1:] == pytest.approx([first, first / 2, first / 4])
    root = ET.fromstring(sweep_svg("t", [8, 16, 32, 64], [throughput, efficiency, train]))
    assert len(_by_class(root, "text", "none")) == 3              # 8 GPUs, in each panel


def test_gpu_tick_labels_are_thinned_so_none_overlaps():
    from planner.cli import svg as svg_text
    from planner.cli.plot import sweep_panels, sweep_svg

    counts = list(range(8, 41)) + [48, 56, 64, 1000, 1024]
    rows = [_row(n, 100.0 * n, 1.0) for n in counts]
    root = ET.fromstring(sweep_svg("t", counts, sweep_panels(rows)))
    ticks = _by_class(root, "text", "xtick")
    panel = [t for t in ticks if float(t.get("x")) < 420           # the first panel's
             and t.get("y") == ticks[0].get("y")]
    assert panel[0].text == "8" and panel[-1].text == "1024"
    assert 3 < len(panel) < len(counts)
    spans = sorted((float(t.get("x")) - svg_text.text_width(t.text) / 2,
                    float(t.get("x")) + svg_text.text_width(t.text) / 2) for t in panel)
    assert all(b[0] > a[1] for a, b in zip(spans, spans[1:]))


def test_bad_sweep_input(cli):
    code, _, err = cli(*ARGS[:3], "--gpus", "8,x")
    assert code == 2 and "is not a list of GPU counts" in err
    code, _, err = cli("sweep", "llama2-7b", "dgx-h100", "--gpus", "8", "--gpu-hour-price", "2")
    assert code == 2 and "--gpu-hour-price: give --tokens too" in err
    code, _, err = cli(*ARGS, "--gpus", "8", "--plot", "")
    assert code == 2 and err.strip() == "Error: --plot: empty path"


def _matplotlib(monkeypatch, installed: bool):
    """Pretend matplotlib is installed (its PNG a stand-in) or absent."""
    import importlib.util

    from planner.cli import plot

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        (real("json") if installed else None) if name == "matplotlib" else real(name, *a)))

    def sweep_png(path, *_):
        if installed:
            open(path, "wb").write(b"\x89PNG\r\n\x1a\n")
        return installed

    monkeypatch.setattr(plot, "sweep_png", sweep_png)


def test_a_png_plot_without_matplotlib_is_refused_before_the_sweep(cli, tmp_path, monkeypatch):
    _matplotlib(monkeypatch, installed=False)
    path = tmp_path / "out.png"
    code, out, err = cli(*ARGS, "--gpus", "8", "--plot", str(path))
    assert (code, out) == (2, "")
    assert err == (f"Error: --plot {path}: PNG needs matplotlib (pip install matplotlib); use "
                   f"a .svg name\n")
    assert list(tmp_path.iterdir()) == []                    # no SVG bytes under a .png name
    code, _, err = cli(*ARGS, "--gpus", "8", "--plot", str(tmp_path / "out.pdf"))
    assert code == 2 and "use a .svg or .png name" in err and list(tmp_path.iterdir()) == []


def test_a_png_plot_with_matplotlib_is_a_png(cli, tmp_path, monkeypatch):
    _matplotlib(monkeypatch, installed=True)
    code, _, err = cli(*ARGS, "--gpus", "8", "--plot", str(tmp_path / "out.png"))
    assert code == 0 and err == f"wrote {tmp_path / 'out.png'}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]
    assert (tmp_path / "out.png").read_bytes().startswith(b"\x89PNG")
    code, _, err = cli(*ARGS, "--gpus", "8", "--plot", str(tmp_path / "s.svg"))
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["out.png", "s.png",
                                                                         "s.svg"]
