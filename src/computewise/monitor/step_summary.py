"""What a tracked loop's steps add up to (``track()``): the totals, the peak MFU divides by, the summary.

**MFU** = achieved FLOP/s over the steps' time / the dense peak of the actual accelerator at the training
precision, from the catalog (or the matmul peak ``computewise bench --save`` measured on it). One device:
in data-parallel training every process tracks its own. A CPU has no detectable peak; name it with
``accelerator=`` to get MFU on CPU.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from computewise.catalog import load_catalog
from computewise.catalog.calibration import measured_peak_flops
from computewise.monitor.clocks import StepClock
from computewise.monitor.diagnosis import data_wait_verdict
from computewise.specs.hardware import Accelerator, Dtype

__all__ = ["Peak", "Step", "StepTotals", "device_peak", "percentiles", "summarize_steps"]


class Step(NamedTuple):
    """One step as the loop saw it: its clock marks, read later, and what it counted."""

    number: int
    t_s: float
    wait: Any  # clock mark where waiting for this step's data began, or None
    start: Any
    end: Any
    samples: int | None
    tokens: int | None
    flops: float | None


@dataclass
class StepTotals:
    """The sums of the steps read so far; a step's samples, tokens and FLOPs count only where known, over the
    time of those steps."""

    steps: int = 0
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    samples: int = 0
    samples_time_s: float = 0.0  # time of the steps whose samples are known
    tokens: int = 0
    tokens_time_s: float = 0.0
    flops: float = 0.0
    flops_time_s: float = 0.0
    step_times_s: array[float] = field(default_factory=lambda: array("d"))

    def add(self, data_wait_s: float, compute_s: float, step: Step) -> None:
        step_s = data_wait_s + compute_s
        self.steps += 1
        self.data_wait_s += data_wait_s
        self.compute_s += compute_s
        self.step_times_s.append(step_s)
        if step.samples is not None:
            self.samples += step.samples
            self.samples_time_s += step_s
        if step.tokens is not None:
            self.tokens += step.tokens
            self.tokens_time_s += step_s
        if step.flops is not None:
            self.flops += step.flops
            self.flops_time_s += step_s


@dataclass(frozen=True)
class Peak:
    """The accelerator MFU divides by, and how it was found (or, without one, why there is none)."""

    accelerator: Accelerator | None
    how: str  # "given" or "detected from 'NVIDIA H100 80GB HBM3'"; the reason when accelerator is None


def device_peak(clock: StepClock | None) -> Peak:
    """The catalog's device the clock times, matched by name and memory; without one (the host, a GPU the
    catalog lacks) the reason and what to pass instead."""
    if clock is None or clock.device_name is None:
        return Peak(
            None,
            "CPU peak unknown: pass accelerator= naming a CPU from the catalog (e.g. 'xeon-8480plus') "
            "to get MFU on CPU",
        )
    found = load_catalog().match_device(clock.device_name, clock.memory_total_bytes)
    if found is None:
        return Peak(
            None,
            f"{clock.device_name!r} is not in the catalog: pass accelerator= naming the closest "
            "(`computewise catalog list accelerators`) or add a row for it",
        )
    return Peak(found, f"detected from {clock.device_name!r}")


def summarize_steps(
    totals: StepTotals,
    wall_s: float,
    peak: Peak,
    precision: Dtype,
    flops_note: str | None,
    clock: str | None,
    unrecorded_steps: int,
) -> dict[str, Any]:
    """Steps, time split, throughput, MFU (with the peak used) and a one-line diagnosis, JSON-ready: what
    ``Tracker.summary`` returns. ``flops_note`` says where the FLOPs came from (None: nowhere)."""
    step_s = totals.data_wait_s + totals.compute_s
    wait_fraction = totals.data_wait_s / step_s if step_s > 0 else None
    achieved = totals.flops / totals.flops_time_s if totals.flops_time_s > 0 else None
    peak_flops = peak.accelerator.peak_flops_for(precision) if peak.accelerator is not None else 0.0
    benched = measured_peak_flops(peak.accelerator.slug, precision) if peak.accelerator is not None else None
    if benched is not None:  # ``computewise bench --save`` measured this device: its real peak
        peak_flops = benched[0]
    mfu = achieved / peak_flops if achieved is not None and peak_flops > 0 else None
    p50_s, p95_s = percentiles(totals.step_times_s)
    peak_info: dict[str, Any] | None = None
    if peak.accelerator is not None and peak_flops > 0:
        acc = peak.accelerator
        peak_info = {
            "accelerator": acc.slug,
            "name": acc.name,
            "precision": precision,
            "flops_per_s": peak_flops,
            "how": peak.how,
            "source": acc.source if benched is None else benched[1].source,
        }
    if totals.steps == 0:
        mfu_note = "no steps recorded"
    elif achieved is None and flops_note is None:
        mfu_note = "no FLOPs known: pass flops_per_step=, or model= with example_inputs= to trace them"
    elif achieved is None:
        mfu_note = "no FLOPs known: the samples of the steps are unknown; count them with samples="
    elif peak.accelerator is None:
        mfu_note = peak.how
    elif peak_info is None:
        mfu_note = f"{peak.accelerator.slug} has no {precision} peak in the catalog; pass precision="
    else:
        kind = f"measured {precision} matmul" if benched is not None else f"dense {precision}"
        mfu_note = (
            f"MFU against the {kind} peak of {peak.accelerator.slug} ({peak.accelerator.name}, "
            f"{peak_flops / 1e12:.4g} TFLOP/s, {peak.how}); pass precision= if the steps run in another one"
        )
        if benched is not None:
            mfu_note += f"; {benched[1].note}"
    samples_per_s = totals.samples / totals.samples_time_s if totals.samples_time_s > 0 else None
    return {
        "steps": totals.steps,
        "wall_s": wall_s,
        "step_time_s": step_s,
        "outside_steps_s": max(0.0, wall_s - step_s),
        "data_wait_s": totals.data_wait_s,
        "data_wait_fraction": wait_fraction,
        "compute_s": totals.compute_s,
        "step_time_p50_s": p50_s,
        "step_time_p95_s": p95_s,
        "samples": totals.samples if totals.samples_time_s > 0 else None,
        "samples_per_s": samples_per_s,
        "tokens": totals.tokens if totals.tokens_time_s > 0 else None,
        "tokens_per_s": totals.tokens / totals.tokens_time_s if totals.tokens_time_s > 0 else None,
        "flops": totals.flops if totals.flops_time_s > 0 else None,
        "flops_source": flops_note,
        "achieved_flops_per_s": achieved,
        "mfu": mfu,
        "mfu_note": mfu_note,
        "peak": peak_info,
        "clock": clock,
        "diagnosis": data_wait_verdict(totals.steps, wait_fraction, samples_per_s),
        "unrecorded_steps": unrecorded_steps,
    }


def percentiles(values: array[float]) -> tuple[float | None, float | None]:
    """The median and 95th percentile of the step times (None, None before any step)."""
    if not values:
        return None, None
    import numpy as np

    p50, p95 = np.percentile(np.frombuffer(values, dtype=np.float64), [50, 95])
    return float(p50), float(p95)
