"""Plain values shared by every layer: models, hardware, prices and jobs."""

from computewise.specs.hardware import (
    DTYPES,
    PRICINGS,
    Accelerator,
    CarbonIntensity,
    Dtype,
    NetworkFabric,
    Offering,
    OnPremCost,
    Pricing,
)
from computewise.specs.model import Architecture, ModelSpec, TracedStats
from computewise.specs.workload import (
    FRAMEWORKS,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTES,
    Framework,
    InferJob,
    Optimizer,
    Parallelism,
    Precision,
    Recompute,
    TrainJob,
)

__all__ = [
    "DTYPES",
    "FRAMEWORKS",
    "OPTIMIZERS",
    "PRECISIONS",
    "PRICINGS",
    "RECOMPUTES",
    "Accelerator",
    "Architecture",
    "CarbonIntensity",
    "Dtype",
    "Framework",
    "InferJob",
    "ModelSpec",
    "NetworkFabric",
    "Offering",
    "OnPremCost",
    "Optimizer",
    "Parallelism",
    "Precision",
    "Pricing",
    "Recompute",
    "TracedStats",
    "TrainJob",
]
