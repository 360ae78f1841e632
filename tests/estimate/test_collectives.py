"""The collective model against published nccl-tests bus bandwidths, and the behaviour it must keep.

Each published figure below is reproduced within 25 % with the efficiencies the catalog ships
(one per fabric, each with its own source in fabrics.csv / assumptions.csv); none of these figures
was used to set an efficiency. Figures the model is known to miss by more are pinned in
``KNOWN_MISSES`` with the reason, so a change that moves them also has to update docs/ACCURACY.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.errors import CatalogError, InputError, UnknownNameError
from computewise.estimate import Assumptions
from computewise.estimate.arrays import col
from computewise.estimate.collectives import (
    Collective,
    Fabric,
    bus_bytes_per_s,
    bus_factor,
    collective_s,
    fabric_for,
    link_problem,
    require_network,
    stack_fabrics,
)
from computewise.estimate.comm_report import CommQuery, estimate_comm, parse_collective

GIB = 2**30
MIB = 2**20
GB = 1e9


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _fabric(catalog: Catalog, instance: str) -> Fabric:
    offering = catalog.instance_offerings(instance)[0]
    return fabric_for(catalog.accelerator(offering.accelerator), offering, catalog)


def _busbw(catalog: Catalog, instance: str, op: Collective, ranks: int, size_bytes: float) -> float:
    """nccl-tests' busbw from the modelled time: size / time * bus factor (PERFORMANCE.md)."""
    fabric = _fabric(catalog, instance)
    time_s = float(collective_s(op, col(size_bytes), col(float(ranks)), col(8.0), fabric))
    return size_bytes / time_s * float(bus_factor(op, col(float(ranks))))


class Published(NamedTuple):
    label: str
    instance: str
    op: Collective
    ranks: int
    size_bytes: float
    busbw_gb_per_s: float


PUBLISHED = [
    # NVIDIA/nccl issue #527 (taruntandon88, 2022-07-25): 1 x p4dn.24xlarge (8 A100, NVLink), 1 GiB, 230.77 GB/s.
    Published("A100 NVLink, p4d 1 node", "p4d.24xlarge", "all-reduce", 8, GIB, 230.77),
    # Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md: ND A100 v4 (8 A100-80GB), 8 GB in-place, 231.58.
    Published("A100 NVLink, ND A100 v4 1 node", "Standard_ND96amsr_A100_v4", "all-reduce", 8, 8 * GIB, 231.58),
    # NVIDIA/nccl-tests issue #290 (2025-03-03): one H100 node, 476 GB/s, "in the expected range for H100" (AddyLaddy,
    # NVIDIA). NCCL uses NVLink SHARP here, which the model does not: it predicts the ring's 360 GB/s (-24 %).
    Published("H100 NVLink, 1 node (NVLS)", "p5.48xlarge", "all-reduce", 8, 8 * GIB, 476.0),
    # github.com/crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv: p5.48xlarge over EFA
    # (3200 Gbps per node), all_reduce_perf 8192 MB out-of-place busbw at 4, 8 and 16 nodes.
    Published("EFA p5, 4 nodes", "p5.48xlarge", "all-reduce", 32, 8192 * MIB, 356.99),
    Published("EFA p5, 8 nodes", "p5.48xlarge", "all-reduce", 64, 8192 * MIB, 355.36),
    Published("EFA p5, 16 nodes", "p5.48xlarge", "all-reduce", 128, 8192 * MIB, 356.27),
    # Same study, data/nccl_all_gather.csv and data/nccl_alltoall.csv, 2048 MB.
    Published("EFA p5 all-gather, 4 nodes", "p5.48xlarge", "all-gather", 32, 2048 * MIB, 330.92),
    Published("EFA p5 all-gather, 16 nodes", "p5.48xlarge", "all-gather", 128, 2048 * MIB, 265.15),
    Published("EFA p5 all-to-all, 2 nodes", "p5.48xlarge", "all-to-all", 16, 2048 * MIB, 79.25),
    Published("EFA p5 all-to-all, 8 nodes", "p5.48xlarge", "all-to-all", 64, 2048 * MIB, 49.63),
    Published("EFA p5 all-to-all, 32 nodes", "p5.48xlarge", "all-to-all", 256, 2048 * MIB, 40.78),
    # aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md: reference output of
    # all_reduce_perf on 2 x p4de.24xlarge (EFA 400 Gbps per node), 2 GiB busbw 78.33 GB/s: the 2-node tree.
    Published("EFA p4de, 2 nodes (tree)", "p4de.24xlarge", "all-reduce", 16, 2 * GIB, 78.33),
    # NVIDIA/nccl issue #812, quoted in #1576 (AddyLaddy, NVIDIA): "On an Nvidia DGX-A100 system we have
    # 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW" (ring; node count not stated, 4 taken).
    Published("InfiniBand HDR, DGX A100 8x200G", "Standard_ND96asr_v4", "all-reduce", 32, 8 * GIB, 192.0),
]


@pytest.mark.parametrize("case", PUBLISHED, ids=[case.label for case in PUBLISHED])
def test_published_nccl_tests_bus_bandwidth_within_25_percent(catalog: Catalog, case: Published) -> None:
    computed = _busbw(catalog, case.instance, case.op, case.ranks, case.size_bytes) / GB
    assert computed == pytest.approx(case.busbw_gb_per_s, rel=0.25), (case.label, computed)


class KnownMiss(NamedTuple):
    label: str
    instance: str
    ranks: int
    size_bytes: float
    busbw_gb_per_s: float
    low: float  # computed / published stays inside [low, high]
    high: float


KNOWN_MISSES = [
    # aws-samples/awsome-distributed-training nccl-tests README, 2 x p5.48xlarge, 16 GiB: 487.09 GB/s. NCCL runs
    # NVLSTree (NVLink SHARP inside the node); the model's classic tree is capped at half the NVLink rate.
    KnownMiss("EFA p5, 2 nodes (NVLSTree)", "p5.48xlarge", 16, 16 * GIB, 487.09, 0.65, 0.75),
    # NVIDIA/nccl issue #527: 4 x p4dn.24xlarge, 1 GiB, 29.61 GB/s with the 2022 EFA software stack; AWS's own
    # 2-node p4de reference (above) implies ~42 GB/s per node today. The model says 40.
    KnownMiss("EFA p4d, 4 nodes (2022 stack)", "p4d.24xlarge", 32, GIB, 29.61, 1.25, 1.45),
    # crazyguitar/aws-gpu-communication-benchmark, 4 x p5, 32 MB: 95.38 GB/s. Mid-size messages: NCCL uses fewer
    # channels and pays per-chunk costs that a per-hop latency does not capture.
    KnownMiss("EFA p5, 4 nodes, 32 MB", "p5.48xlarge", 32, 32 * MIB, 95.38, 1.8, 2.4),
]


@pytest.mark.parametrize("case", KNOWN_MISSES, ids=[case.label for case in KNOWN_MISSES])
def test_known_misses_stay_as_documented(catalog: Catalog, case: KnownMiss) -> None:
    ratio = _busbw(catalog, case.instance, "all-reduce", case.ranks, case.size_bytes) / GB / case.busbw_gb_per_s
    assert case.low <= ratio <= case.high, (case.label, ratio)


def test_the_efficiencies_come_from_fabric_rows_with_sources(catalog: Catalog) -> None:
    assert _fabric(catalog, "p5.48xlarge").network_efficiency == pytest.approx(catalog.fabric("efa").network_efficiency)
    assert _fabric(catalog, "Standard_ND96isr_H100_v5").network_efficiency == pytest.approx(
        catalog.fabric("infiniband").network_efficiency
    )
    assert {row.fabric for row in catalog.fabrics} >= {"efa", "infiniband", "roce", "ethernet"}
    assert all(row.source and 0 < row.network_efficiency <= 1 for row in catalog.fabrics)
    for key in ("intra_node_link_latency_s", "inter_node_latency_s", "collective_base_latency_s"):
        assert 0 < catalog.assumption(key) < 1e-3, key
    assert catalog.assumption("simple_protocol_latency_factor") > 1


# ------------------------------------------------------------------------------ behaviour


def _two_level(node_network_gb: float = 200.0, link_gb: float = 300.0) -> Fabric:
    """A DGX-like node: 8 devices, NVLink 300 GB/s, 8 x 200 Gb/s NICs, round efficiencies."""
    return Fabric(
        devices_per_node=col(8.0),
        link_bytes_per_s=col(link_gb * GB),
        node_network_bytes_per_s=col(node_network_gb * GB),
        link_efficiency=col(0.8),
        network_efficiency=col(0.9),
        link_latency_s=col(0.6e-6),
        network_latency_s=col(2.7e-6),
        base_latency_s=col(6.6e-6),
        simple_latency_factor=col(5.0),
    )


def test_large_message_bus_bandwidth_does_not_depend_on_the_number_of_nodes() -> None:
    fabric = _two_level()
    ranks = col([24.0, 64.0, 512.0, 8192.0])
    busbw = bus_bytes_per_s("all-reduce", ranks, col(8.0), fabric)
    np.testing.assert_allclose(busbw, 180 * GB)  # 200 GB/s x 0.9: the whole node network
    size = 64.0 * GIB
    time_s = collective_s("all-reduce", col(size), ranks, col(8.0), fabric)
    measured = size / time_s * bus_factor("all-reduce", ranks)
    assert measured.max() / measured.min() < 1.02


def test_small_messages_are_latency_bound() -> None:
    fabric = _two_level()
    tiny, small = (float(collective_s("all-reduce", col(b), col(64.0), col(8.0), fabric)) for b in (8.0, 1024.0))
    assert small == pytest.approx(tiny, rel=0.05)  # 128x the bytes, the same time
    assert tiny > 10e-6  # base cost plus hops, never free
    more_nodes = float(collective_s("all-reduce", col(8.0), col(8192.0), col(8.0), fabric))
    assert more_nodes > tiny  # the tree adds log2(nodes) network hops
    busbw = 8.0 / tiny * float(bus_factor("all-reduce", col(64.0)))
    assert busbw < 1e-3 * 180 * GB


def test_a_group_with_one_rank_per_node_gets_an_eighth_of_the_node_network() -> None:
    fabric = _two_level()
    one_per_node = float(bus_bytes_per_s("all-reduce", col(64.0), col(1.0), fabric))
    full_nodes = float(bus_bytes_per_s("all-reduce", col(64.0), col(8.0), fabric))
    assert full_nodes == pytest.approx(200 * GB * 0.9)
    assert one_per_node == pytest.approx(200 * GB * 0.9 / 8)


def test_the_node_network_is_capped_by_the_link_inside_the_node() -> None:
    fabric = _two_level(node_network_gb=400.0, link_gb=200.0)
    assert float(bus_bytes_per_s("all-gather", col(64.0), col(8.0), fabric)) == pytest.approx(160 * GB)


def test_all_to_all_is_slower_across_nodes_than_inside_one() -> None:
    fabric = _two_level()
    inside = float(bus_bytes_per_s("all-to-all", col(8.0), col(8.0), fabric))
    across = bus_bytes_per_s("all-to-all", col([16.0, 64.0, 1024.0]), col(8.0), fabric)
    assert inside == pytest.approx(240 * GB)
    assert (across < inside / 4).all()
    # Many nodes: each rank is limited to its own rail (one NIC's 25 GB/s x 0.9), like sjeaugey's remark in
    # NVIDIA/nccl-tests issue #267: "Alltoall cannot aggregate the bandwidth of multiple NICs".
    assert float(across[-1]) == pytest.approx(25 * GB * 0.9, rel=0.02)


def test_send_recv_uses_one_link_inside_and_one_rail_across() -> None:
    fabric = _two_level()
    inside = float(bus_bytes_per_s("send-recv", col(2.0), col(2.0), fabric))
    across = float(bus_bytes_per_s("send-recv", col(2.0), col(1.0), fabric))
    assert inside == pytest.approx(240 * GB)
    assert across == pytest.approx(200 * GB * 0.9 / 8)
    time_s = float(collective_s("send-recv", col(1e9), col(2.0), col(1.0), fabric))
    assert time_s == pytest.approx(1e9 / across, rel=0.01)
    assert float(collective_s("send-recv", col(1e9), col(1.0), col(1.0), fabric)) == 0.0


def test_two_nodes_beat_the_network_rate_with_the_tree_but_three_do_not() -> None:
    fabric = _two_level()
    two = float(bus_bytes_per_s("all-reduce", col(16.0), col(8.0), fabric))
    three = float(bus_bytes_per_s("all-reduce", col(24.0), col(8.0), fabric))
    assert two > 180 * GB  # the tree sends each byte across once
    assert two <= 2 * 15 / 16 * 180 * GB
    assert three == pytest.approx(180 * GB)


def test_nothing_to_move_takes_no_time() -> None:
    fabric = _two_level()
    time_s = collective_s("all-reduce", col([0.0, 1e6, 1e6]), col([8.0, 1.0, 8.0]), col(8.0), fabric)
    assert time_s[0] == 0.0 and time_s[1] == 0.0 and time_s[2] > 0.0


def test_columns_in_columns_out_and_a_planner_can_expand_fabrics(catalog: Catalog) -> None:
    stacked = stack_fabrics([_fabric(catalog, "p4d.24xlarge"), _fabric(catalog, "p5.48xlarge")])
    expanded = stacked.take(np.array([0, 1, 1]))
    time_s = collective_s("all-reduce", col(GIB), col([32.0, 32.0, 8.0]), col(8.0), expanded)
    assert time_s.shape == (3,)
    assert time_s[0] > time_s[1] > time_s[2]  # 400 Gbps EFA, then 3200 Gbps EFA, then NVLink only
    single = _fabric(catalog, "p4d.24xlarge").take(np.array([0, 0]))
    assert single.devices_per_node.shape == (2,)


def test_fabric_for_uses_the_assumptions_it_is_given(catalog: Catalog) -> None:
    offering = catalog.instance_offerings("p5.48xlarge")[0]
    accelerator = catalog.accelerator("h100-sxm")
    slower = dataclasses.replace(Assumptions.from_catalog(catalog), intra_node_link_efficiency=0.5)
    fabric = fabric_for(accelerator, offering, catalog, slower)
    assert float(fabric.link_efficiency) == 0.5
    assert float(fabric.node_network_bytes_per_s) == offering.network_bytes_per_s
    unnamed = dataclasses.replace(offering, fabric="")
    generic = fabric_for(accelerator, unnamed, catalog)
    assert float(generic.network_efficiency) == catalog.assumption("inter_node_network_efficiency")
    on_prem = fabric_for(accelerator, None, catalog, devices_per_node=4)
    assert float(on_prem.devices_per_node) == 4 and float(on_prem.node_network_bytes_per_s) == 0


def test_a_group_across_nodes_needs_a_network(catalog: Catalog) -> None:
    no_network = catalog.instance_offerings("gpu_8x_h100_sxm5")[0]
    require_network(no_network, 8, 8)  # one node: fine
    with pytest.raises(InputError, match="no network bandwidth") as raised:
        require_network(no_network, 16, 8)
    assert "gpu_8x_h100_sxm5" in str(raised.value) and "offerings" in (raised.value.hint or "")
    with pytest.raises(InputError, match="no instance"):
        require_network(None, 16, 8)


# ------------------------------------------------------------------------------ the estimate comm query


def test_parse_collective_accepts_spellings_and_suggests() -> None:
    assert parse_collective("AllReduce") == "all-reduce"
    assert parse_collective("reduce_scatter") == "reduce-scatter"
    assert parse_collective("alltoall") == "all-to-all"
    with pytest.raises(UnknownNameError, match="did you mean 'all-gather'"):
        parse_collective("allgathr")


def test_estimate_comm_picks_the_fastest_network_node_and_says_so(catalog: Catalog) -> None:
    query = CommQuery(op="all-reduce", gpus=64, sizes_bytes=(float(GIB),), cloud="aws")
    result = estimate_comm(catalog, catalog.accelerator("h100"), query)
    assert result.instance.instance_type == "p5.48xlarge"
    assert result.instance.fabric == "efa"
    assert result.nodes == 8
    row = result.rows[0]
    assert row.busbw_bytes_per_s == pytest.approx(row.algbw_bytes_per_s * 2 * 63 / 64)
    assert "2(n-1)/n" in result.formula


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (CommQuery("all-reduce", 0, (1e9,)), "--gpus"),
        (CommQuery("all-reduce", 2_000_000, (1e9,)), "1,000,000"),
        (CommQuery("all-reduce", 8, (0.0,)), "--bytes"),
        (CommQuery("all-reduce", 8, (2.0**41,)), "1 TiB"),
        (CommQuery("all-reduce", 16, (1e9,), ranks_per_node=9), "--per-node"),
        (CommQuery("all-reduce", 16, (1e9,), instance_type="gpu_8x_h100_sxm5"), "no network bandwidth"),
        (CommQuery("all-reduce", 16, (1e9,), ranks_per_node=3), "do not fill nodes of 3 evenly"),
        (CommQuery("all-reduce", 20, (1e9,), cloud="aws"), "do not fill nodes of 8 evenly"),
    ],
)
def test_estimate_comm_rejects_bad_input(catalog: Catalog, query: CommQuery, message: str) -> None:
    with pytest.raises(InputError, match=message):
        estimate_comm(catalog, catalog.accelerator("h100"), query)


# ------------------------------------------------------------------------------ catalog validation


def test_an_offering_naming_an_unknown_fabric_is_a_catalog_error(tmp_path: Path) -> None:
    bundled = Path(__file__).resolve().parents[2] / "src/computewise/catalog/data/offerings.csv"
    header, first = bundled.read_text(encoding="utf-8").splitlines()[:2]
    row = first.replace("p3.2xlarge", "p3.custom").rsplit(",", 1)[0] + ",infinibnd"
    path = tmp_path / "offerings-mine.csv"
    path.write_text(f"{header}\n{row}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="did you mean 'infiniband'"):
        load_catalog([path])


def test_a_fabric_efficiency_above_one_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "fabrics-mine.csv"
    path.write_text(
        "fabric,name,network_efficiency,latency_s,source,retrieved\n"
        "spectrum-x,Spectrum-X,1.2,3e-6,my test,2025-01-01\n",
        encoding="utf-8",
    )
    with pytest.raises(CatalogError, match="at most 1"):
        load_catalog([path])


@pytest.mark.parametrize(("gpu", "gpus"), [("apple-m2", 4), ("xeon-8488c", 16), ("jetson-agx-orin-64gb", 2)])
def test_estimate_comm_refuses_a_link_of_unknown_speed(catalog: Catalog, gpu: str, gpus: int) -> None:
    """The check estimate train and infer make, before any arithmetic could give inf."""
    accelerator = catalog.accelerator(gpu)
    problem = link_problem(accelerator, gpus)
    assert problem is not None and link_problem(accelerator, 1) is None
    with pytest.raises(InputError) as raised:
        estimate_comm(catalog, accelerator, CommQuery("all-reduce", gpus, (1e9,)))
    assert (raised.value.message, raised.value.hint) == problem


def test_estimate_comm_on_one_rank_moves_nothing(catalog: Catalog) -> None:
    result = estimate_comm(catalog, catalog.accelerator("h100"), CommQuery("all-gather", 1, (8.0, float(GIB))))
    assert [(row.time_s, row.busbw_bytes_per_s) for row in result.rows] == [(0.0, 0.0), (0.0, 0.0)]
    assert result.peak_busbw_bytes_per_s == 0.0
    assert "latency" not in result.formula and result.notes == ("1 rank: no communication, so every size takes 0 us",)
