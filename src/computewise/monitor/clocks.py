"""The clocks of ``track()``: how a step's marks become seconds, on the host or on the GPU.

CUDA kernels run asynchronously, so a host clock would time their launches, not their work. When the
caller's process has imported torch and initialized CUDA, every step records a pair of
``torch.cuda.Event``; the events are read once the GPU has passed them (``done``), never by
synchronizing in the loop. Elsewhere, ``time.perf_counter``. torch is never imported here, only found
in ``sys.modules``: ``track()`` works in a plain Python loop.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Literal, Protocol

from computewise.errors import InputError

__all__ = ["ClockChoice", "CudaEventClock", "HostClock", "StepClock", "cuda_in_use", "pick_clock"]

ClockChoice = Literal["auto", "host", "cuda"]


class StepClock(Protocol):
    """Marks points in a step and turns pairs of marks into seconds, possibly later (an async device).

    ``done(mark)`` says whether the mark can be read without waiting; ``wait(mark)`` blocks until it
    can. ``device_name`` and ``memory_total_bytes`` describe the accelerator the clock times (None
    for the host), so the tracker can find its peak in the catalog.
    """

    name: str
    device_name: str | None
    memory_total_bytes: float | None

    def mark(self) -> Any: ...

    def done(self, mark: Any) -> bool: ...

    def wait(self, mark: Any) -> None: ...

    def seconds(self, start: Any, end: Any) -> float: ...


class HostClock:
    """``time.perf_counter``: every mark is readable at once."""

    name = "host"
    device_name: str | None = None
    memory_total_bytes: float | None = None

    def mark(self) -> float:
        return time.perf_counter()

    def done(self, mark: Any) -> bool:
        return True

    def wait(self, mark: Any) -> None:
        return None

    def seconds(self, start: Any, end: Any) -> float:
        return float(end - start)


class CudaEventClock:
    """``torch.cuda.Event`` pairs on the current stream of the current device, read lazily."""

    name = "cuda-events"

    def __init__(self, torch: Any) -> None:
        self._event = torch.cuda.Event
        device = torch.cuda.current_device()
        self.device_name: str | None = str(torch.cuda.get_device_name(device))
        self.memory_total_bytes: float | None = float(torch.cuda.get_device_properties(device).total_memory)

    def mark(self) -> Any:
        event = self._event(enable_timing=True)
        event.record()
        return event

    def done(self, mark: Any) -> bool:
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0  # elapsed_time is in milliseconds


def cuda_in_use() -> Any:
    """torch, if the caller imported it and initialized CUDA; None otherwise (we never import it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch


def pick_clock(choice: ClockChoice) -> StepClock:
    """The clock ``choice`` names: 'auto' times with CUDA events when CUDA is in use, the host clock otherwise;
    'cuda' without a CUDA device is an InputError."""
    if choice == "host":
        return HostClock()
    torch = cuda_in_use()
    if choice == "cuda":
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            raise InputError(
                "track(clock='cuda') needs torch with a CUDA device, and none is available here",
                "leave clock='auto' to time with CUDA events when CUDA is in use and the host clock otherwise",
            )
    if torch is not None:
        return CudaEventClock(torch)
    return HostClock()
