"""Pure estimators: memory, FLOPs, time, communication, cost, energy, storage.

Every formula works on numpy columns so ``estimate`` (one row) and ``plan`` (all rows) share it.
"""

from computewise.estimate.assumptions import Assumptions
from computewise.estimate.infer import InferColumns, InferRows, evaluate_infer
from computewise.estimate.memory import MemoryBreakdown
from computewise.estimate.single import InferEstimate, TrainEstimate, estimate_infer, estimate_train
from computewise.estimate.train import TrainColumns, TrainHardware, TrainLayout, evaluate_train, train_memory

__all__ = [
    "Assumptions",
    "InferColumns",
    "InferEstimate",
    "InferRows",
    "MemoryBreakdown",
    "TrainColumns",
    "TrainEstimate",
    "TrainHardware",
    "TrainLayout",
    "estimate_infer",
    "estimate_train",
    "evaluate_infer",
    "evaluate_train",
    "train_memory",
]
