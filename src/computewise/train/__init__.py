"""Training that runs fast and survives being killed: precision, accumulation, checkpoints, preemption, ``fit()``."""
