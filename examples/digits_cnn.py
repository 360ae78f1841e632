"""A small CNN on scikit-learn's digits (8x8 images of 0-9): the convolutional reference workload.

Two 3x3 convolutions and a linear classifier, cross-entropy, AdamW; ``evaluate`` is the loss on a
held-out 30 % split, so early stopping and "keep the best checkpoint" have something real to
watch. It exists for the settings only a CNN exercises (``channels_last``) and as the second CPU
workload of ``computewise tune``. Try it from the repository root::

    computewise tune examples.digits_cnn:setup
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from computewise.train.setup import TrainingSetup

DEFAULTS: dict[str, Any] = {"global_batch": 64, "lr": 1e-3, "channels": 16, "seed": 0}


@cache
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8),
        labels.astype(np.int64),
        test_size=0.3,
        random_state=0,
        stratify=labels,
    )
    return x_train, x_test, y_train, y_test


class DigitsCNN(nn.Module):
    """1x8x8 images -> 10 logits: conv-relu, conv-relu-pool, linear."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.head = nn.Linear(2 * channels * 4 * 4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(images))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        logits: torch.Tensor = self.head(x.flatten(1))
        return logits


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of one micro-batch of (images, labels)."""
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def setup(config: dict[str, Any]) -> TrainingSetup:
    """The training setup for ``config`` (keys of DEFAULTS; an unknown key is an error)."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown digits_cnn setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    values = {**DEFAULTS, **config}
    seed, lr = int(values["seed"]), float(values["lr"])
    x_train, x_test, y_train, y_test = _split()
    with torch.random.fork_rng(devices=[]):
        # A fixed initialization that leaves the caller's RNG stream untouched.
        torch.manual_seed(seed)
        model = DigitsCNN(int(values["channels"]))
    held_out = (torch.from_numpy(x_test), torch.from_numpy(y_test))

    def make_optimizer(parameters: Iterable[nn.Parameter], fused: bool) -> torch.optim.Optimizer:
        return torch.optim.AdamW(parameters, lr=lr, fused=fused)

    def evaluate(trained: nn.Module) -> float:
        """Validation cross-entropy on the held-out split, on the model's own device."""
        device = next(trained.parameters()).device
        was_training = trained.training
        trained.eval()
        with torch.no_grad():
            loss = classification_loss(trained, (held_out[0].to(device), held_out[1].to(device)))
        trained.train(was_training)
        return float(loss)

    return TrainingSetup(
        model=model,
        loss=classification_loss,
        dataset=torch.utils.data.TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
        global_batch_size=int(values["global_batch"]),
        make_optimizer=make_optimizer,
        evaluate=evaluate,
        seed=seed,
    )
