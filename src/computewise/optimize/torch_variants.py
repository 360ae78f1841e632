"""PyTorch variants: the FP32 eager baseline, BF16/FP16, ``torch.compile``, dynamic INT8, pruning.

Each builder takes the shared ``Workspace`` and returns a ``Built`` or raises ``VariantSkipped``
with the reason (no CUDA, no BF16 units, nothing prunable). Every variant that can be exported is
saved as a TorchScript program in its own dtype and timed as loaded from that file, so the exported
artifact is self-contained and is what was measured; ``torch.compile`` cannot be saved, so it is
measured but never chosen. Pruning keeps the model in PyTorch;
``pruned_then_quantized`` in ``onnx_variants`` carries a structured-pruned model on to ONNX Runtime.
"""

from __future__ import annotations

import io
import itertools
import shutil
import warnings
from typing import Any

from computewise.errors import VariantSkipped
from computewise.optimize.predictors import ProgramPredictor, TorchPredictor
from computewise.optimize.workspace import Built, Workspace, quiet_tools

__all__ = [
    "build_bf16",
    "build_compile",
    "build_dynamic_int8",
    "build_fp16",
    "build_fp32",
    "build_magnitude_pruned",
    "build_structured_pruned",
    "prune_ffn_neurons",
]


def _device(workspace: Workspace) -> str:
    return "cuda" if workspace.hardware.cuda_device else "cpu"


def _eager_built(workspace: Workspace, module: Any, recipe: list[str], settings: dict[str, Any], blocker: str) -> Built:
    """A module run as is: measured, never exported (``blocker`` says why)."""
    device = _device(workspace)
    module = module.to(device)
    import torch

    # the serialized state is what the weights weigh; it counts INT8 packed weights, which are not parameters
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return Built(
        predictor=TorchPredictor(module, workspace.source.positional, device),
        recipe=recipe,
        format="torch",
        size_bytes=buffer.tell(),
        torch_recipe={"device": device} | settings,
        export_blocker=blocker,
    )


def _program_built(workspace: Workspace, module: Any, recipe: list[str], settings: dict[str, Any]) -> Built:
    """The module traced to a TorchScript file in its own dtype, and timed as loaded back from that file.

    What is measured is what ships: ``computewise serve`` loads the same file without the source
    model. Tracing records one example's shapes; grading then runs the program on every batch size
    and sentence length, so a trace that does not generalise fails there instead of in production.
    """
    import torch

    device = _device(workspace)
    module = module.to(device).eval()
    feed = workspace.source.feed
    example = feed.batch(range(min(2, len(feed))))
    names = tuple(example)
    tensors = {name: torch.from_numpy(array).to(device) for name, array in example.items()}
    # text models take (input_ids, attention_mask, token_type_ids) in the tokenizer's order
    positional = workspace.source.positional or workspace.source.is_text
    target = workspace.fresh_path("pytorch", ".pt")
    with quiet_tools(), torch.no_grad():
        if positional:
            program = torch.jit.trace(module, tuple(tensors.values()), check_trace=False)  # type: ignore[no-untyped-call]
        else:
            program = torch.jit.trace(module, example_kwarg_inputs=tensors, check_trace=False)  # type: ignore[no-untyped-call]
        torch.jit.save(program, str(target))
    return Built(
        predictor=ProgramPredictor(str(target), names, positional, device),
        recipe=[*recipe, "saved as a TorchScript program"],
        format="torchscript",
        model_file=target,
        size_bytes=target.stat().st_size,
        torch_recipe={"device": device} | settings,
        program_inputs=names,
        program_positional=positional,
    )


def build_fp32(workspace: Workspace) -> Built:
    if workspace.source.module is None:
        raise VariantSkipped("the model is an ONNX file")
    # on a GPU the copy moves, and the CPU original stays for the ONNX export
    module = workspace.fresh_module() if _device(workspace) != "cpu" else workspace.source.module
    blocker = "the FP32 eager baseline is the reference every variant is compared with"
    return _eager_built(workspace, module, ["PyTorch eager, FP32"], {"dtype": "float32"}, blocker)


def build_bf16(workspace: Workspace) -> Built:
    import torch

    if not (workspace.hardware.cuda_device or workspace.hardware.cpu_runs_bf16):
        raise VariantSkipped("this CPU has no BF16 units (AVX512-BF16 or AMX); BF16 would be emulated and slower")
    module = workspace.fresh_module().to(torch.bfloat16)
    return _program_built(
        workspace, _CastOutput(torch, module), ["PyTorch, weights and math in BF16"], {"dtype": "bfloat16"}
    )


def build_fp16(workspace: Workspace) -> Built:
    import torch

    if not workspace.hardware.cuda_device:
        raise VariantSkipped("FP16 needs a CUDA GPU; CPUs emulate it")
    module = workspace.fresh_module().to(torch.float16)
    return _program_built(workspace, _CastOutput(torch, module), ["PyTorch, FP16"], {"dtype": "float16"})


def _CastOutput(torch: Any, module: Any) -> Any:
    """Float inputs follow the module's dtype in, so a half-precision module takes the FP32 feed."""
    dtype = next(module.parameters()).dtype

    class CastOutput(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            cast = [a.to(dtype) if a.is_floating_point() else a for a in args]
            named = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in kwargs.items()}
            return self.inner(*cast, **named).float()

    return CastOutput()


def build_compile(workspace: Workspace) -> Built:
    import torch

    if not workspace.hardware.cuda_device and shutil.which("cc") is None and shutil.which("gcc") is None:
        raise VariantSkipped("torch.compile on CPU needs a C compiler (cc/gcc) and none is on PATH")
    module = workspace.fresh_module()
    # dynamic=True: text batches change length every call; static shapes would recompile for each.
    compiled = torch.compile(module, dynamic=True)
    return _eager_built(
        workspace,
        compiled,
        ["torch.compile (inductor, dynamic shapes), FP32"],
        {"dtype": "float32", "compile": True},
        "torch.compile builds its kernels inside the serving process: there is no file to export",
    )


def build_dynamic_int8(workspace: Workspace) -> Built:
    import torch

    if workspace.hardware.cuda_device:
        raise VariantSkipped("PyTorch dynamic INT8 runs on CPU only")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates the quantized tensor API but still ships it
        module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            workspace.fresh_module(), {torch.nn.Linear}, dtype=torch.qint8
        )
    return _program_built(
        workspace,
        module,
        ["PyTorch dynamic INT8 on every nn.Linear (per-tensor activations)"],
        {"dtype": "float32", "quantize": "dynamic-int8"},
    )


def build_magnitude_pruned(workspace: Workspace, sparsity: float) -> Built:
    """Zero the smallest-magnitude weights of every ``nn.Linear``: smaller when compressed, not faster."""
    import torch
    from torch.nn.utils import prune

    module = workspace.fresh_module()
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise VariantSkipped("the model has no nn.Linear layers to prune")
    for layer in linears:
        prune.l1_unstructured(layer, "weight", amount=sparsity)  # type: ignore[no-untyped-call]
        prune.remove(layer, "weight")  # type: ignore[no-untyped-call]
    recipe = [f"magnitude pruning: {sparsity:.0%} of each nn.Linear's weights zeroed (dense kernels, same speed)"]
    return _program_built(workspace, module, recipe, {"dtype": "float32", "magnitude_sparsity": sparsity})


def build_structured_pruned(workspace: Workspace, sparsity: float) -> Built:
    module = workspace.fresh_module()
    pruned = prune_ffn_neurons(module, sparsity)
    recipe = [f"structured pruning: {sparsity:.0%} of the hidden neurons of {pruned} feed-forward blocks removed"]
    return _program_built(workspace, module, recipe, {"dtype": "float32", "structured_sparsity": sparsity})


def _linear_pairs(module: Any) -> list[tuple[Any, Any]]:
    """(first, second) ``nn.Linear`` pairs joined by an elementwise activation.

    Two shapes are recognised: Hugging Face encoder blocks (``intermediate.dense`` feeding
    ``output.dense``, as in BERT, RoBERTa and MiniLM) and ``nn.Sequential`` chains.
    """
    import torch

    pairs: list[tuple[Any, Any]] = []
    for parent in module.modules():
        intermediate, output = getattr(parent, "intermediate", None), getattr(parent, "output", None)
        first, second = getattr(intermediate, "dense", None), getattr(output, "dense", None)
        if isinstance(first, torch.nn.Linear) and isinstance(second, torch.nn.Linear):
            pairs.append((first, second))
        if isinstance(parent, torch.nn.Sequential):
            layers = list(parent)
            linear_positions = [i for i, layer in enumerate(layers) if isinstance(layer, torch.nn.Linear)]
            for a, b in itertools.pairwise(linear_positions):
                between_is_elementwise = all(
                    not isinstance(layer, torch.nn.Linear | torch.nn.Sequential) for layer in layers[a + 1 : b]
                )
                if between_is_elementwise and layers[a].out_features == layers[b].in_features:
                    pairs.append((layers[a], layers[b]))
    return pairs


def prune_ffn_neurons(module: Any, sparsity: float) -> int:
    """Remove the ``sparsity`` fraction of hidden neurons with the smallest weight norms, in place.

    A neuron's importance is ||row of W1|| * ||column of W2||; removing it shrinks both matrices,
    so the pruned model really does less arithmetic. Returns how many blocks were pruned.
    """
    import torch

    pairs = _linear_pairs(module)
    if not pairs:
        raise VariantSkipped("no Linear -> activation -> Linear blocks found to prune structurally")
    for first, second in pairs:
        importance = first.weight.norm(dim=1) * second.weight.norm(dim=0)
        keep_count = max(1, round(first.out_features * (1 - sparsity)))
        keep = importance.topk(keep_count).indices.sort().values
        with torch.no_grad():
            first.weight = torch.nn.Parameter(first.weight[keep].clone())
            if first.bias is not None:
                first.bias = torch.nn.Parameter(first.bias[keep].clone())
            second.weight = torch.nn.Parameter(second.weight[:, keep].clone())
        first.out_features = keep_count
        second.in_features = keep_count
    return len(pairs)
