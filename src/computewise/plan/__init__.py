"""Search the catalog for the best way to run a job: enumerate, filter, rank, freeze."""

from computewise.plan.infer import INFER_PRECISIONS, InferConstraints, InferOption, InferPlan, plan_infer
from computewise.plan.onprem import BreakEven, compare_onprem
from computewise.plan.result import Option, Plan, Rejection, pareto_front
from computewise.plan.train import CLOUD_PRICINGS, TRAIN_PRECISIONS, TrainConstraints, plan_train

__all__ = [
    "CLOUD_PRICINGS",
    "INFER_PRECISIONS",
    "TRAIN_PRECISIONS",
    "BreakEven",
    "InferConstraints",
    "InferOption",
    "InferPlan",
    "Option",
    "Plan",
    "Rejection",
    "TrainConstraints",
    "compare_onprem",
    "pareto_front",
    "plan_infer",
    "plan_train",
]
