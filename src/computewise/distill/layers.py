"""Hidden-state matching: each student layer also learns to write what its teacher layer writes.

The pooled embedding is one target vector per sentence. A layer's hidden states are one vector per
token, so matching them gives the student tokens x layers times more targets per sentence, which is
what a student trained on a few thousand of the user's sentences lacks. Student layer j is matched to
the teacher layer it was copied from (TinyBERT, Jiao et al. 2020, section 3.1, matches hidden states
layer to layer the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["LayerTaps", "hidden_state_loss"]


class LayerTaps:
    """Forward hooks that keep the hidden states the given layers wrote in the latest forward pass."""

    def __init__(self, layers: Sequence[Any]) -> None:
        self.layers = list(layers)
        self.states: list[Any] = [None] * len(self.layers)
        self._handles: list[Any] = []

    def __enter__(self) -> LayerTaps:
        for index, layer in enumerate(self.layers):
            self._handles.append(layer.register_forward_hook(self._keeper(index)))
        return self

    def __exit__(self, *_: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.states = [None] * len(self.layers)

    def _keeper(self, index: int) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            # Hugging Face layers return a tuple (hidden states first) in some releases, a tensor in others
            self.states[index] = output[0] if isinstance(output, tuple) else output

        return keep


def hidden_state_loss(student: Sequence[Any], teacher: Sequence[Any], attention_mask: Any) -> Any:
    """The mean over layers of the squared error on real tokens, relative to the teacher's squared norm.

    Relative, so that every layer counts alike whatever the size of its activations, and the sum
    sits on the scale of the embedding loss (0 when equal, about 1 when the student writes nothing).
    """
    mask = attention_mask.unsqueeze(-1).to(teacher[0].dtype)
    pairs = list(zip(student, teacher, strict=True))
    return sum(((s - t) ** 2 * mask).sum() / (t**2 * mask).sum().clamp(min=1e-12) for s, t in pairs) / len(pairs)
