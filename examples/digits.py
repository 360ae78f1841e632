"""A small classifier on scikit-learn's digits (8x8 images of 0-9), for ``computewise optimize``.

``classifier()`` trains a two-layer MLP in about a second (fixed seed, so every run gets the same
model) and returns it with example inputs; ``accuracy(predict)`` is a labelled metric on the
held-out images. Try it from the repository root::

    computewise optimize examples.digits:classifier --eval examples.digits:accuracy --max-drop 1%
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

HIDDEN_UNITS = 256
EPOCHS = 60


@cache
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (images / 16.0).astype(np.float32), labels, test_size=0.3, random_state=0, stratify=labels
    )
    return x_train, x_test, y_train, y_test


@cache
def _trained() -> Any:
    import torch

    torch.manual_seed(0)
    x_train, _x_test, y_train, _y_test = _split()
    model = torch.nn.Sequential(
        torch.nn.Linear(64, HIDDEN_UNITS),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN_UNITS, HIDDEN_UNITS),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN_UNITS, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, targets = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _epoch in range(EPOCHS):
        for start in range(0, len(inputs), 64):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs[start : start + 64]), targets[start : start + 64])
            loss.backward()
            optimizer.step()
    return model.eval()


def classifier() -> tuple[Any, Any]:
    """The trained MLP and the held-out images as example inputs (N x 64 float32)."""
    import torch

    return _trained(), torch.from_numpy(_split()[1])


def accuracy(predict: Callable[[np.ndarray], np.ndarray]) -> float:
    """Top-1 accuracy on the held-out images; ``predict`` maps images to logits."""
    _x_train, x_test, _y_train, y_test = _split()
    return float((predict(x_test).argmax(axis=1) == y_test).mean())
