"""A watched process, assembled in one place: what ``run``, ``serve``, ``tune`` and a supervised job share.

    hardware (what the driver or the device reports)
      -> price   ``pricing.frozen_price``: ``estimate.quote``'s answer, frozen for the ledger (the one call)
      -> row     ``recorded.new_run``, the GPU matched to the catalog's device        } ``priced_row``
      -> run     ``recorded.RecordedRun``: the row written before the work, finished by the one rule
      -> watch   ``Watch``: the sampler over a process tree, its energy model, the ledger writer (whose
                 every flush is also the run's heartbeat)
      -> chores  ``Periodic``: a check or a count every few seconds, on a daemon thread

``run`` watches its child and checks budgets; ``serve`` watches itself and counts its inferences;
``tune`` records the search without sampling it (its trials are processes of their own); a supervised
job (``scale.supervise``) is priced from the resources it asks for, with the same ``frozen_price`` and
``new_run``, and heart-beaten while an engine runs it elsewhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from computewise.catalog import Catalog
from computewise.estimate.quote import PriceRequest
from computewise.ledger import NewRun, RunKind
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import GpuSource
from computewise.monitor.pricing import DetectedHardware, frozen_price
from computewise.monitor.process import ExitUsage, ProcessTreeSampler
from computewise.monitor.recorded import RecordedRun, catalog_accelerator, new_run
from computewise.monitor.sampler import LedgerWriter, Sampler, Sink

__all__ = ["Periodic", "Watch", "priced_row", "say"]


def say(stream: TextIO, message: str) -> None:
    """A monitor's note to the user; a closed or broken stream never takes the watched work down."""
    try:
        stream.write(f"computewise: {message}\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def priced_row(
    catalog: Catalog,
    kind: RunKind,
    command: Sequence[str] | str,
    hardware: DetectedHardware,
    request: PriceRequest,
    *,
    tags: Mapping[str, str],
    interval_s: float,
    argv: Sequence[str] | None = None,
    input_hash: str | None = None,
    started_at_s: float | None = None,
    stream: TextIO | None = None,
) -> NewRun:
    """The row of a run on ``hardware``, priced at launch as ``request`` asks (``--hourly-usd``, ``--instance``,
    else the catalog's cheapest rate for the hardware); a price computewise had to assume is said on ``stream``.

    The price is frozen into the row (``row.price``): editing the catalog later never changes this run's cost.
    """
    price = frozen_price(catalog, hardware.ask(catalog), request)
    if price.assumed and stream is not None:
        say(stream, f"price {price.explanation}")
    return new_run(
        kind,
        command,
        hardware=hardware,
        price=price,
        tags=tags,
        interval_s=interval_s,
        argv=argv,
        accelerator=catalog_accelerator(catalog, hardware),
        input_hash=input_hash,
        started_at_s=started_at_s,
    )


class Watch:
    """Samples the process tree of ``pid`` into ``run`` (started: its row is written) every ``interval_s``:
    the sampler, the energy model of the GPUs it sees and the ledger writer, started and stopped together.

    ``sinks`` see every sample after the writer (Prometheus, an idle guard, a live line). A failed write
    calls ``on_error`` once per run of failures and never stops the watched work.
    """

    def __init__(
        self,
        run: RecordedRun,
        pid: int,
        gpu: GpuSource,
        catalog: Catalog,
        interval_s: float,
        *,
        flush_s: float,
        on_error: Callable[[Exception], None],
        sinks: Sequence[Sink] = (),
    ) -> None:
        self._writer = LedgerWriter(run.ledger, run.run_id, flush_s=flush_s, on_error=on_error)
        energy = EnergyModel.from_catalog(catalog, gpu.status().devices)
        self._sampler = Sampler(
            run.run_id, ProcessTreeSampler(pid), gpu, energy, interval_s, sinks=[self._writer, *sinks]
        )

    def start(self) -> Watch:
        self._writer.start()
        self._sampler.start()
        return self

    def stop(self, usage: ExitUsage | None = None) -> None:
        """One last sample (``usage``: the job's exact ``wait4`` totals, when it was our child), so even a
        short run has its energy, then every buffered row written."""
        self._sampler.stop(usage)
        self._writer.close()


class Periodic:
    """Calls ``action`` every ``every_s`` on a daemon thread between ``start`` and ``stop``: a run's chores
    (budget checks, the inferences served) that must neither block the work nor outlive it."""

    def __init__(self, action: Callable[[], None], every_s: float, name: str) -> None:
        self._action, self._every_s = action, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self._action()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
