"""The student a ``--student`` spec describes, built from the teacher so that training starts close.

Two shapes need no code from the user:

- ``layers=K`` for a Hugging Face encoder: the teacher with K of its N transformer layers, evenly
  spaced from the first to the last (layers 0, 3, 5 of 6), each starting from the teacher's weights,
  as DistilBERT initialises its student from layers of BERT (Sanh et al., 2019, section 3). The last
  layer is kept because it writes the embedding: on all-MiniLM-L6-v2 the untrained 3-layer student
  starts at a mean cosine of 0.66 with the teacher keeping layers 0, 3, 5, against 0.36 keeping 0, 2, 4
  (300 held-aside stdlib sentences, measured on this project's CPU);
- ``width=F`` for an ``nn.Sequential`` of ``Linear`` layers: every hidden layer keeps the share F of
  its units, initialised from the teacher's first units (the rows of a layer and the matching columns
  of the next), so the student begins as a truncation of the teacher rather than from noise.

The input and output layers keep their sizes: the student answers with the teacher's shape, which
is what lets ``optimize`` grade it against the teacher and ``serve`` take its place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from computewise.errors import InputError, ModelConfigError
from computewise.optimize.source import ModelSource

__all__ = ["Student", "StudentSpec", "build_student", "encoder_layers", "kept_layers", "parse_student"]


@dataclass(frozen=True)
class StudentSpec:
    """``layers=K`` (encoders) or ``width=F`` (``nn.Sequential``): exactly one is set."""

    layers: int | None = None
    width: float | None = None

    def __str__(self) -> str:
        return f"layers={self.layers}" if self.layers is not None else f"width={self.width:g}"


@dataclass
class Student:
    """The student module to train, a factory for its export copy, and what it kept of the teacher."""

    module: Any  # the nn.Module trained in place
    export_module: Callable[[], Any]  # a fresh module with the trained weights, built as the teacher exports
    description: str
    teacher_parameters: int
    student_parameters: int
    teacher_layers: tuple[int, ...] = ()  # the teacher layer each student encoder layer was copied from


def parse_student(text: str) -> StudentSpec:
    """``layers=3`` or ``width=0.5``; anything else is an ``InputError`` that shows both forms."""
    key, _, value = text.partition("=")
    key = key.strip().lower()
    hint = "write --student layers=3 (a Hugging Face encoder) or --student width=0.5 (an nn.Sequential MLP)"
    try:
        if key == "layers":
            layers = int(value)
            if not 1 <= layers <= 1000:
                raise InputError(f"--student layers={layers}: a student keeps between 1 and the teacher's layers", hint)
            return StudentSpec(layers=layers)
        if key == "width":
            width = float(value)
            if not 0 < width < 1:
                raise InputError(f"--student width={value}: the share of units kept is above 0 and below 1", hint)
            return StudentSpec(width=width)
    except ValueError as error:
        raise InputError(f"cannot read --student {text!r}: {error}", hint) from error
    raise InputError(f"unknown --student {text!r}", hint)


def kept_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Evenly spaced teacher layers from the first to the last: 3 of 6 keeps 0, 3, 5; 4 of 12 keeps 0, 4, 7, 11."""
    if student_layers == 1:
        return [teacher_layers - 1]
    step = (teacher_layers - 1) / (student_layers - 1)
    return [int(i * step + 0.5) for i in range(student_layers)]


def _parameters(module: Any) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def build_student(teacher: ModelSource, spec: StudentSpec) -> Student:
    """The student of ``teacher`` that ``spec`` describes; a spec the model cannot take is a ``ModelConfigError``."""
    if teacher.module is None:
        raise ModelConfigError(
            "an ONNX file cannot be distilled: there are no weights to start a student from",
            "give the teacher as a Hugging Face directory or a package.module:function",
        )
    if spec.layers is not None:
        return _fewer_layers(teacher, spec.layers)
    if spec.width is None:
        raise InputError("a student spec needs layers=K or width=F", "see computewise distill --help")
    return _narrower(teacher, spec.width)


def encoder_layers(text_model: Any, where: str) -> Any:
    """The ``encoder.layer`` list of a Hugging Face text model; a ``ModelConfigError`` where it has none."""
    backbone = getattr(text_model, "backbone", None)
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if layers is None:
        raise ModelConfigError(
            f"--student layers=K needs a Hugging Face encoder with encoder.layer ({where} has none)",
            "use a BERT-family encoder (BERT, RoBERTa, MiniLM, MPNet), or --student width=F for an nn.Sequential",
        )
    return layers


def _drop_layers(text_model: Any, keep: list[int]) -> Any:
    """``text_model`` (modified) with only the encoder layers ``keep``; its config says the new depth."""
    import torch

    backbone = text_model.backbone
    backbone.encoder.layer = torch.nn.ModuleList([backbone.encoder.layer[i] for i in keep])
    backbone.config.num_hidden_layers = len(keep)
    return text_model


def _fewer_layers(teacher: ModelSource, layers: int) -> Student:
    total = len(encoder_layers(teacher.module, teacher.description))
    if layers >= total:
        raise InputError(
            f"--student layers={layers} keeps every layer of a {total}-layer teacher: nothing to distil",
            f"choose fewer than {total}, e.g. --student layers={max(1, total // 2)}",
        )
    keep = kept_layers(total, layers)
    student = _drop_layers(copy.deepcopy(teacher.module), keep)
    rebuild = teacher.export_module

    def export_module() -> Any:
        fresh = _drop_layers(rebuild() if rebuild is not None else copy.deepcopy(teacher.module), keep)
        fresh.load_state_dict(student.state_dict())
        return fresh.eval()

    return Student(
        module=student,
        export_module=export_module,
        description=f"{layers} of {total} layers (teacher layers {', '.join(map(str, keep))})",
        teacher_parameters=_parameters(teacher.module),
        student_parameters=_parameters(student),
        teacher_layers=tuple(keep),
    )


def _narrower(teacher: ModelSource, width: float) -> Student:
    import torch

    module = teacher.module
    linears = [m for m in module] if isinstance(module, torch.nn.Sequential) else []
    dense = [i for i, m in enumerate(linears) if isinstance(m, torch.nn.Linear)]
    parametrised = [m for m in linears if any(True for _ in m.parameters(recurse=False))]
    if len(dense) < 2 or len(parametrised) != len(dense):
        raise ModelConfigError(
            f"--student width=F needs an nn.Sequential of Linear layers and parameter-free activations "
            f"({teacher.description} is {type(module).__name__})",
            "use --student layers=K for a Hugging Face encoder, or distil this model with your own student",
        )
    layers: list[Any] = []
    previous_keep: int | None = None
    for index, layer in enumerate(linears):
        if not isinstance(layer, torch.nn.Linear):
            layers.append(copy.deepcopy(layer))
            continue
        inputs = layer.in_features if previous_keep is None else previous_keep
        outputs = layer.out_features if index == dense[-1] else max(1, round(layer.out_features * width))
        narrow = torch.nn.Linear(inputs, outputs, bias=layer.bias is not None)
        with torch.no_grad():
            narrow.weight.copy_(layer.weight[:outputs, :inputs])
            if layer.bias is not None:
                narrow.bias.copy_(layer.bias[:outputs])
        layers.append(narrow)
        previous_keep = outputs
    student = torch.nn.Sequential(*layers)
    widths = [layers[i].out_features for i in dense[:-1]]
    teacher_widths = [linears[i].out_features for i in dense[:-1]]
    return Student(
        module=student,
        export_module=lambda: copy.deepcopy(student).eval(),
        description=f"hidden widths {teacher_widths} -> {widths}",
        teacher_parameters=_parameters(module),
        student_parameters=_parameters(student),
    )
