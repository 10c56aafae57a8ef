"""The fabric behind the NICs (issue 12, point 6): NICs per node, oversubscription above the
leaf switches, and what tensor parallelism across nodes then costs."""

import dataclasses

import pytest
import yaml

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.enums import Collective
from planner.inputs import presets
from planner.inputs.loader import load_cluster
from planner.schemas.cluster import ClusterSpec

GiB = 2**30


def cluster(preset="dgx-a100-80gb", **inter_node) -> ClusterSpec:
    data = yaml.safe_load(presets.path(preset).read_text())
    data["inter_node"].update(inter_node)
    return ClusterSpec.model_validate(data)


def bus_gb_per_s(net, group, collective=Collective.ALL_REDUCE, size=8 * GiB):
    seconds = comm.collective_time_s(collective, size, group, net)
    return comm.bus_bandwidth(collective, size, seconds, group.size) / 1e9


FOUR_NODES = Group(size=32, ranks_per_node=8, num_nodes=4)


def test_rail_optimised_default_is_one_nic_per_gpu():
    # DGX A100, 8x HDR 200 Gb/s: 192 GB/s across nodes (NVIDIA/nccl#812); stating 8 NICs per
    # node changes nothing.
    assert bus_gb_per_s(load_cluster("dgx-a100-80gb").network, FOUR_NODES) == pytest.approx(
        192, rel=0.05)
    assert bus_gb_per_s(cluster(nics_per_node=8).network, FOUR_NODES) == pytest.approx(
        bus_gb_per_s(load_cluster("dgx-a100-80gb").network, FOUR_NODES), rel=1e-12)


def test_one_nic_per_node_caps_a_cross_node_ring_at_that_nic():
    # One HDR NIC per node: the node's whole ring goes through 25 GB/s (line rate x the
    # preset's 0.96 bus fraction); the NIC shares are 1/8 per GPU.
    c = cluster(nics_per_node=1)
    nic = 25 * c.efficiency.inter_node_bus_fraction
    assert c.inter_bus_bytes_per_s == pytest.approx(nic * 1e9 / 8)
    assert bus_gb_per_s(c.network, FOUR_NODES) == pytest.approx(nic, rel=0.02)
    # An expert all-to-all's off-node bytes share the one NIC too: 8x slower than on rails.
    a2a = [comm.all_to_all_time_s(GiB, FOUR_NODES, x.network)
           for x in (load_cluster("dgx-a100-80gb"), c)]
    assert a2a[1] / a2a[0] == pytest.approx(8, rel=0.01)


def test_oversubscription_slows_groups_beyond_a_leaf_only():
    # 2:1 above leaves of 16 nodes: a 4-node ring stays under its leaf, a 64-node ring crosses
    # the oversubscribed tier at half the NIC rate (the bandwidth term; latency unchanged).
    flat, over = load_cluster("dgx-a100-80gb").network, cluster(
        oversubscription=2.0, nodes_per_leaf=16).network
    assert bus_gb_per_s(over, FOUR_NODES) == pytest.approx(bus_gb_per_s(flat, FOUR_NODES))
    wide = Group(size=64, ranks_per_node=1, num_nodes=64)     # a data-parallel ring, 1 per node
    assert comm.ring_bus_bytes_per_s(wide, over) == pytest.approx(
        comm.ring_bus_bytes_per_s(wide, flat) / 2)
    # Without nodes_per_leaf every cross-node group pays it.
    anywhere = cluster(oversubscription=2.0).network
    assert comm.ring_bus_bytes_per_s(FOUR_NODES, anywhere) == pytest.approx(
        comm.ring_bus_bytes_per_s(FOUR_NODES, flat) / 2)


def _tp_comm(cli, write, cluster_file, tp):
    import json

    strategy = write("s.yaml", f"tp: {tp}\npp: 1\nsequence_parallel: true\nzero_stage: 1\n"
                               f"recompute: full\ntp_comm_overlap: false\n")
    _, out, _ = cli("validate", "llama3-70b", cluster_file, strategy, "--gpus", "64",
                    "--no-compare", "--cross-node-tp", "--json")
    return json.loads(out)["time"]["tp_comm_s"]


def test_cross_node_tp_pays_for_the_nics_it_crosses(cli, write):
    # tp 16 over two DGX H100 nodes: on 8 rails the ring's bus bandwidth is min(NVLink,
    # 8 NICs) (nccl#812's aggregation), so tp 16 costs a few times tp 8 (latency, more steps);
    # with one NIC per node the same ring crawls at one NIC (50 GB/s against NVLink's ~360
    # GB/s bus bandwidth, with twice the ring steps): over 10x tp 8. (Raw collective
    # times: without tp_comm_overlap, which would hide tp 8's and not tp 16's.)
    rails = write("rails.yaml", presets.path("dgx-h100").read_text())
    data = yaml.safe_load(presets.path("dgx-h100").read_text())
    data["inter_node"]["nics_per_node"] = 1
    one = write("one.yaml", yaml.safe_dump(data))
    tp8, tp16 = _tp_comm(cli, write, rails, 8), _tp_comm(cli, write, rails, 16)
    assert 1.5 < tp16 / tp8 < 4
    assert _tp_comm(cli, write, one, 8) == pytest.approx(tp8)
    assert _tp_comm(cli, write, one, 16) / tp8 > 10


def test_collectives_field_is_refused_with_why(cli, write, tiny_model):
    data = yaml.safe_load(presets.path("dgx-h100").read_text())
    data["collectives"] = "gloo"
    path = write("c.yaml", yaml.safe_dump(data))
    code, _, err = cli("plan", tiny_model, path, "--gpus", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "collectives: not a field" in err and "remove it" in err


def test_fabric_fields_are_validated(write, cli, tiny_model):
    data = yaml.safe_load(presets.path("dgx-h100").read_text())
    data["inter_node"]["oversubscription"] = 0.5
    code, _, err = cli("plan", tiny_model, write("c.yaml", yaml.safe_dump(data)), "--gpus", "8")
    assert code == 2 and "inter_node.oversubscription" in err


def test_network_carries_the_fabric():
    c = cluster(nics_per_node=2, oversubscription=3.0, nodes_per_leaf=32)
    assert dataclasses.asdict(c.network)["oversubscription"] == 3.0
    assert c.network.nodes_per_leaf == 32


def test_nvlink_domain_spans_nodes():
    # GB200 NVL72: 18 trays of 4 GPUs share one NVLink domain of 72 (NVIDIA GB200 NVL72
    # datasheet): a tensor-parallel group of 16 over 4 trays stays on NVLink, while the node
    # (launch unit, host memory) is a tray.
    from planner.costing.placement import tp_placement

    c = load_cluster("gb200-nvl72")
    assert (c.gpus_per_node, c.nvlink_gpus, c.num_gpus) == (4, 72, 576)
    group = tp_placement(16, c.nvlink_gpus)
    assert group.num_nodes == 1
    assert comm.ring_bus_bytes_per_s(group, c.network) == pytest.approx(c.intra_bus_bytes_per_s)


def test_tp_beyond_a_node_but_within_the_nvlink_domain_needs_no_flag(cli, write):
    strategy = write("s.yaml", "tp: 16\npp: 1\nsequence_parallel: true\nzero_stage: 1\n")
    code, out, _ = cli("validate", "llama3-405b", "gb200-nvl72", strategy, "--gpus", "64",
                       "--no-compare")
    assert "tp_within_node" not in out
    code, out, _ = cli("validate", "llama3-405b", "dgx-b200", strategy, "--gpus", "64",
                       "--no-compare")
    assert code == 1 and "tp_within_node" in out


def test_nvlink_domain_must_hold_whole_nodes(write, cli, tiny_model):
    data = yaml.safe_load(presets.path("gb200-nvl72").read_text())
    data["nvlink_domain"] = 70
    code, _, err = cli("plan", tiny_model, write("c.yaml", yaml.safe_dump(data)), "--gpus", "8")
    assert code == 2 and "nvlink_domain (70) must be a multiple of gpus_per_node (4)" in err


def test_torchrun_launches_a_tray_of_four_on_gb200(cli, write, tmp_path):
    strategy = write("s.yaml", "tp: 8\npp: 1\nsequence_parallel: true\nzero_stage: 1\n")
    out_dir = tmp_path / "out"
    code, _, _ = cli("emit", "llama3-70b", "gb200-nvl72", strategy, "--gpus", "64",
                     "--target", "torchrun", "--out", str(out_dir))
    assert code == 0
    text = "\n".join(p.read_text() for p in out_dir.iterdir())
    assert "NPROC_PER_NODE=${NPROC_PER_NODE:-4}" in text and "NNODES=${NNODES:-16}" in text


def test_leaf_size_counts_nodes_even_where_nvlink_spans_several():
    # gb200-nvl72: a leaf of 18 trays is one 72-GPU rack. A data-parallel ring with one rank
    # per rack over all 8 racks crosses the 4:1 tier; one inside a rack never touches it.
    flat = cluster("gb200-nvl72").network
    over = cluster("gb200-nvl72", oversubscription=4.0, nodes_per_leaf=18).network
    racks = Group(size=8, ranks_per_node=1, num_nodes=8)
    assert comm.ring_bus_bytes_per_s(racks, over) == pytest.approx(
        comm.ring_bus_bytes_per_s(racks, flat) / 4)
    rack = Group(size=72, ranks_per_node=72, num_nodes=1)
    assert comm.ring_bus_bytes_per_s(rack, over) == comm.ring_bus_bytes_per_s(rack, flat)


def test_tp_beyond_the_domain_is_told_a_tp_the_heads_allow(cli, write):
    # 72 GPUs share NVLink, but llama3-405b's 128 heads (8 KV heads) allow tp 8 at most there.
    strategy = write("s.yaml", "tp: 144\npp: 1\n")
    code, out, _ = cli("validate", "llama3-405b", "gb200-nvl72", strategy, "--gpus", "576",
                       "--no-compare")
    flat = " ".join(out.split())
    assert code == 1 and "tp_within_node: tp (144) exceeds nvlink_domain (72)" in flat
    assert "fix: use tp 8 (or allow it with --cross-node-tp)" in flat
