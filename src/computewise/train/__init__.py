"""Training that runs fast and survives being killed: precision, accumulation, checkpoints, preemption, ``fit()``.

Every piece works from a plain PyTorch loop; ``fit()`` composes them. torch is imported inside the
functions, so importing this package stays cheap.
"""

from computewise.ledger import PREEMPTED_EXIT_CODE
from computewise.train.checkpoint import CheckpointStore, capture_rng, restore_rng
from computewise.train.config import TrainConfig, load_config, write_config
from computewise.train.data import SampleOrder, make_loader
from computewise.train.early_stopping import EarlyStopping
from computewise.train.engine import StepEngine
from computewise.train.fit import FitResult, fit
from computewise.train.preemption import Preempted, PreemptionGuard
from computewise.train.setup import TrainingSetup, load_setup

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "CheckpointStore",
    "EarlyStopping",
    "FitResult",
    "Preempted",
    "PreemptionGuard",
    "SampleOrder",
    "StepEngine",
    "TrainConfig",
    "TrainingSetup",
    "capture_rng",
    "fit",
    "load_config",
    "load_setup",
    "make_loader",
    "restore_rng",
    "write_config",
]
