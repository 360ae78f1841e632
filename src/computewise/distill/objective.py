"""What the student is trained to match: the teacher's outputs on the user's unlabelled inputs.

- embeddings: 1 - cosine similarity (the direction, which retrieval uses) plus the mean squared
  error (the length, which an unnormalised embedding also carries);
- classifiers: the KL divergence between the teacher's and the student's softened class
  distributions at temperature T, times T^2 so its gradients keep their scale as T changes
  (Hinton, Vinyals and Dean, "Distilling the Knowledge in a Neural Network", 2015, section 2);
- regressors: the mean squared error.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TEMPERATURE", "distillation_loss"]

TEMPERATURE = 2.0  # Hinton et al. report temperatures of 2-20 working; 2 keeps the argmax sharp for small students


def distillation_loss(task: str, student: Any, teacher: Any) -> Any:
    """The mean loss of a batch of ``student`` outputs against the ``teacher``'s (torch tensors)."""
    import torch
    import torch.nn.functional as functional

    if task == "embedding":
        cosine = functional.cosine_similarity(student, teacher, dim=-1)
        return (1 - cosine).mean() + functional.mse_loss(student, teacher)
    if task == "classifier":
        log_student = functional.log_softmax(student / TEMPERATURE, dim=-1)
        log_teacher = functional.log_softmax(teacher / TEMPERATURE, dim=-1)
        return functional.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True) * TEMPERATURE**2
    return torch.mean((student - teacher) ** 2)
