"""``plan.federated`` against cases computed by hand: every expected number is worked out in the comments."""

from __future__ import annotations

import json

import pytest

from computewise.errors import InputError
from computewise.plan.federated import FederatedJob, FederatedPlan, RadioModel, plan_federated, update_bytes

# 1e6 parameters (4 MB in fp32), 6e6 training FLOPs per sample (6N), 100 clients of which 10 % per round,
# 10 rounds of 5 local steps x 10 samples, a client at 1 GFLOP/s x 0.5 drawing 2 W, 1 Mbit/s up and
# 4 Mbit/s down, a server streaming 1 GB/s at $3.60/h; radio 1 uJ/byte up, 0.1 uJ/byte down, 1 W active.
JOB = FederatedJob(
    model_name="toy",
    params=1e6,
    flops_per_sample=6e6,
    clients=100,
    participation=0.1,
    rounds=10,
    local_steps=5,
    local_batch=10,
    client_device="toy-phone",
    client_memory_bytes=8e6,  # room for the fp32 weights and gradients, no more
    client_peak_flops=1e9,
    client_mfu=0.5,
    client_power_w=2.0,
    uplink_bits_per_s=1e6,
    downlink_bits_per_s=4e6,
    compression="none",
    topk_ratio=0.01,
    server_memory_bytes_per_s=1e9,
    server_usd_per_h=3.6,
    radio=RadioModel(uplink_j_per_byte=1e-6, downlink_j_per_byte=1e-7, active_w=1.0),
)


def test_an_uncompressed_round_by_hand() -> None:
    plan = plan_federated(JOB)
    r = plan.chosen
    assert r.participants == 10  # max(1, round(0.1 x 100))
    assert r.download_s == pytest.approx(8.0)  # 4e6 bytes x 8 bits / 4e6 bit/s
    assert r.upload_s == pytest.approx(32.0)  # 4e6 x 8 / 1e6
    assert r.compute_s == pytest.approx(0.6)  # 5 steps x 10 samples x 6e6 = 3e8 FLOPs / (1e9 x 0.5)
    assert r.aggregation_s == pytest.approx(0.044)  # (10 updates + 1 model) x 4e6 bytes / 1e9 bytes/s
    assert r.round_s == pytest.approx(40.644)  # 8 + 0.6 + 32 + 0.044
    assert r.bytes_per_round == pytest.approx(8e7)  # 10 clients x (4e6 down + 4e6 up)
    assert plan.wall_s == pytest.approx(406.44)  # 10 rounds
    assert plan.bytes_total == pytest.approx(8e8)
    assert plan.server_usd == pytest.approx(0.40644)  # $3.60/h x 406.44 s / 3600
    assert r.client_compute_j == pytest.approx(1.2)  # 2 W x 0.6 s
    assert r.client_radio_j == pytest.approx(44.4)  # 4e6 x 1e-6 + 4e6 x 1e-7 + 1 W x (32 + 8) s = 4 + 0.4 + 40
    assert plan.client_energy_j_total == pytest.approx(4560.0)  # 10 rounds x 10 clients x 45.6 J


def test_compression_shrinks_the_upload_by_hand() -> None:
    by_name = {r.compression: r for r in plan_federated(JOB).compressions}
    # int8: 1 byte per parameter, a quarter of fp32: 1e6 x 8 / 1e6 = 8 s up; round 8 + 0.6 + 8 + 0.044
    assert update_bytes(1e6, "int8", 0.01) == pytest.approx(update_bytes(1e6, "none", 0.01) / 4)
    assert by_name["int8"].upload_s == pytest.approx(8.0)
    assert by_name["int8"].round_s == pytest.approx(16.644)
    assert by_name["int8"].client_radio_j == pytest.approx(17.4)  # 1 + 0.4 + 1 W x 16 s
    # topk 1 %: 1e4 values x (4-byte value + 4-byte index) = 8e4 bytes: 0.64 s; round 8 + 0.6 + 0.64 + 0.044
    assert by_name["topk"].upload_bytes_per_client == pytest.approx(8e4)
    assert by_name["topk"].round_s == pytest.approx(9.284)
    assert by_name["topk"].client_radio_j == pytest.approx(0.08 + 0.4 + 8.64)
    # the download stays fp32 whatever the compression
    assert {r.download_bytes_per_client for r in by_name.values()} == {4e6}


def test_participation_scales_bytes_and_energy_not_round_time() -> None:
    effect = {p.participation: p for p in plan_federated(JOB).participation_effect}
    assert sorted(effect) == [0.01, 0.1, 1.0]
    one, ten, all_ = effect[0.01], effect[0.1], effect[1.0]
    assert (one.participants, ten.participants, all_.participants) == (1, 10, 100)
    assert one.bytes_total == pytest.approx(8e7)  # 10 rounds x 1 client x 8e6 bytes
    assert all_.bytes_total == pytest.approx(8e9)
    assert all_.client_energy_j_total == pytest.approx(100 * ten.client_energy_j_total / 10)
    # only the aggregation grows: (100 + 1) x 4e6 / 1e9 = 0.404 s instead of 0.044 s per round
    assert all_.wall_s - ten.wall_s == pytest.approx(10 * (0.404 - 0.044))


def test_the_plan_reads_back_from_its_json() -> None:
    plan = plan_federated(JOB)
    again = FederatedPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"clients": 0}, "--clients must be at least 1"),
        ({"participation": 1.5}, "--participation must be in (0, 1]"),
        ({"participation": 0.0}, "--participation must be in (0, 1]"),
        ({"uplink_bits_per_s": 0.0}, "--uplink must be above 0"),
        ({"rounds": 0}, "--rounds must be at least 1"),
        ({"client_memory_bytes": 8e6 - 1}, "toy does not fit on toy-phone: local training needs at least 7.6 MiB"),
    ],
)
def test_bad_input_is_refused_with_a_fix(change: dict[str, float], fragment: str) -> None:
    from dataclasses import replace

    with pytest.raises(InputError) as error:
        plan_federated(replace(JOB, **change))  # type: ignore[arg-type]
    assert fragment in error.value.message and error.value.hint
