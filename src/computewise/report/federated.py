"""The ``plan federated`` tables: one round by part, the totals, and what compression and participation change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from computewise.report.rows import Grid, format_kwh

if TYPE_CHECKING:
    from rich.console import Console

    from computewise.plan.federated import FederatedPlan
    from computewise.plan.federated_request import PlannedFederation

__all__ = ["federated_compression_grid", "federated_participation_grid", "print_federated"]


def print_federated(planned: PlannedFederation, console: Console) -> None:
    """The round and totals first, then the alternatives, then what was assumed."""
    from rich.text import Text

    from computewise.report.table import print_table
    from computewise.report.terminal import print_pairs
    from computewise.units import format_bytes, format_duration, format_usd, plural

    plan = planned.plan
    r = plan.chosen
    console.print(Text(f"plan federated {plan.model_name}", style="bold"))
    print_pairs(
        [
            (
                "federation",
                f"{plan.clients:,} clients x {plan.participation:g} = {r.participants:,} per round, "
                f"{plural(plan.rounds, 'round')} of {plural(plan.local_steps, 'local step')} x "
                f"{plural(plan.local_batch, 'sample')}",
            ),
            (
                "client",
                f"{plan.client_device}, up {plan.uplink_bits_per_s / 1e6:g} Mbit/s, "
                f"down {plan.downlink_bits_per_s / 1e6:g} Mbit/s",
            ),
            (
                "one round",
                f"{format_duration(r.round_s)}: download {format_duration(r.download_s)}, compute "
                f"{format_duration(r.compute_s)}, upload {format_duration(r.upload_s)} ({r.compression}), "
                f"aggregation {format_duration(r.aggregation_s)}",
            ),
            (
                "bytes per round",
                f"{format_bytes(r.bytes_per_round)} ({format_bytes(r.download_bytes_per_client)} down, "
                f"{format_bytes(r.upload_bytes_per_client)} up per client)",
            ),
            ("wall time", f"{format_duration(plan.wall_s)} for {plural(plan.rounds, 'round')}"),
            ("traffic", format_bytes(plan.bytes_total)),
            ("server", f"{format_usd(plan.server_usd)} at {format_usd(plan.server_usd_per_h)}/h"),
            (
                "client energy",
                f"{format_kwh(plan.client_energy_j_total / 3.6e6)} in all; {format_kwh(r.client_j / 3.6e6)} per client "
                f"per round ({format_kwh(r.client_compute_j / 3.6e6, like=r.client_j / 3.6e6)} compute, "
                f"{format_kwh(r.client_radio_j / 3.6e6, like=r.client_j / 3.6e6)} radio)",
            ),
        ],
        console,
    )
    console.print()
    console.print(Text("compression (upload)", style="bold"))
    print_table(federated_compression_grid(plan), console)
    console.print()
    console.print(Text("participation", style="bold"))
    print_table(federated_participation_grid(plan), console)
    for note in [*plan.notes, *(f"{key}: {value}" for key, value in planned.assumed.items())]:
        console.print(f"* {note}", style="dim", highlight=False, markup=False, emoji=False)


def federated_compression_grid(plan: FederatedPlan) -> Grid:
    """Each compression at the chosen participation: upload per client, round time, total time and energy."""
    from computewise.units import format_bytes, format_duration

    rounds = plan.rounds
    rows = tuple(
        (
            r.compression,
            format_bytes(r.upload_bytes_per_client),
            format_duration(r.upload_s),
            format_duration(r.round_s),
            format_duration(rounds * r.round_s),
            f"{rounds * r.participants * r.client_j / 3.6e6:.3g}",
        )
        for r in plan.compressions
    )
    headers = ("compression", "upload/client", "upload", "round", "wall time", "client kWh")
    return Grid(headers, rows, frozenset(range(1, 6)), whole=frozenset({0}))


def federated_participation_grid(plan: FederatedPlan) -> Grid:
    """The chosen compression at other participations: bytes and energy scale, time does not (identical clients)."""
    from computewise.units import format_bytes, format_duration

    rows = tuple(
        (
            f"{p.participation:g}",
            f"{p.participants:,}",
            format_bytes(p.bytes_total),
            f"{p.client_energy_j_total / 3.6e6:.3g}",
            format_duration(p.wall_s),
        )
        for p in plan.participation_effect
    )
    return Grid(("participation", "clients/round", "traffic", "client kWh", "wall time"), rows, frozenset(range(5)))
