"""trace_module / measure_module against torch's own counter on real CPU tensors, and against
figures worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from computewise.errors import ModelConfigError  # noqa: E402
from computewise.models import measure_module, preset, trace_module  # noqa: E402
from computewise.models.shape import FAMILIES, count_params  # noqa: E402
from computewise.specs.model import ModelSpec  # noqa: E402

pytestmark = pytest.mark.torch

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 97, 64, 4, 2, 16, 3


class MHABlock(nn.Module):
    """Pre-norm GPT block on nn.MultiheadAttention (its bmm path: need_weights defaults to True)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: Any) -> Any:
        t = x.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class SDPABlock(nn.Module):
    """Pre-norm GPT block on F.scaled_dot_product_attention."""

    def __init__(self, causal: bool = True) -> None:
        super().__init__()
        self.causal = causal
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, block: type[nn.Module]) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, idx: Any) -> Any:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class SmallCNN(nn.Module):
    """Plain, strided, grouped and transposed convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=4),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 8, 2, stride=2),
            nn.ReLU(),
        )
        self.head = nn.Linear(8, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x).mean(dim=(2, 3)))


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = 4 * width
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Any) -> Any:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 in torchvision's layout (He et al. 2016), so no torchvision is needed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks: list[nn.Module] = []
        in_channels = 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for index in range(count):
                blocks.append(Bottleneck(in_channels, width, stride if index == 0 else 1))
                in_channels = 4 * width
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, 1000)

    def forward(self, x: Any) -> Any:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


def reference_forward_flops(module: nn.Module, *inputs: Any) -> int:
    """torch.utils.flop_counter on the real module and real CPU tensors.

    Attention is forced onto the math kernel: torch 2.13's FlopCounterMode has no formula for
    _scaled_dot_product_flash_attention_for_cpu and would count CPU attention as zero.
    """
    module.train()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        module(*inputs)
    return int(counter.get_total_flops())


def real_param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def tokens() -> Any:
    return torch.randint(0, VOCAB, (BATCH, SEQ))


# 2 batched matmuls (QK^T, PV) of 2*B*H*T*T*d FLOPs each, per layer.
ATTENTION_FLOPS = LAYERS * 2 * (2 * BATCH * HEADS * SEQ * SEQ * (DIM // HEADS))


@pytest.mark.parametrize("block", [MHABlock, SDPABlock], ids=["multihead", "sdpa"])
def test_tiny_gpt_matches_torch_flop_counter_and_parameter_bytes(block: type[nn.Module]) -> None:
    model = TinyGPT(block)
    measured = measure_module(model, tokens())

    assert measured.param_bytes == real_param_bytes(model)
    assert measured.params == sum(p.numel() for p in model.parameters())
    assert measured.forward_flops == reference_forward_flops(model, tokens())
    assert measured.attention_flops == ATTENTION_FLOPS
    assert measured.batch_size == BATCH


@pytest.mark.parametrize("block", [MHABlock, SDPABlock], ids=["multihead", "sdpa"])
def test_causal_attention_is_halved_only_in_the_causal_aware_figure(block: type[nn.Module]) -> None:
    model = TinyGPT(block)
    flagged = measure_module(model, tokens())
    never = measure_module(model, tokens(), causal=False)

    assert flagged.causal_attention_flops == ATTENTION_FLOPS
    assert flagged.forward_flops_causal_aware == flagged.forward_flops - ATTENTION_FLOPS / 2
    assert never.forward_flops == flagged.forward_flops
    assert never.forward_flops_causal_aware == never.forward_flops


def test_causal_override_applies_to_calls_without_the_flag() -> None:
    class Bidirectional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = SDPABlock(causal=False)

        def forward(self, x: Any) -> Any:
            return self.block(x)

    model = Bidirectional()
    x = torch.randn(BATCH, SEQ, DIM)
    as_flagged = measure_module(model, x)
    forced = measure_module(model, x, causal=True)
    attention = 2 * (2 * BATCH * HEADS * SEQ * SEQ * (DIM // HEADS))

    assert as_flagged.causal_attention_flops == 0
    assert forced.forward_flops_causal_aware == forced.forward_flops - attention / 2


def test_cnn_matches_torch_flop_counter_and_is_reported_as_cnn() -> None:
    model = SmallCNN()
    images = torch.randn(4, 3, 16, 16)
    measured = measure_module(model, images)

    assert measured.forward_flops == reference_forward_flops(model, images)
    assert measured.param_bytes == real_param_bytes(model)
    spec = trace_module(model, images)
    assert spec.architecture == "cnn"
    assert spec.traced is not None
    assert spec.traced.forward_flops_per_sample == measured.forward_flops / 4
    # A traced network's step is timed by its kernels, which trace_module counts (measure_module only on request).
    assert measured.kernels is None
    assert spec.traced.kernels == measure_module(model, images, kernels=True).kernels
    assert spec.traced.kernels is not None and spec.traced.kernels.convolutions > 0


def test_a_module_fixed_to_its_batch_is_timed_by_its_flops_and_says_so() -> None:
    class FixedBatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)

        def forward(self, x: Any) -> Any:
            return self.conv(x).reshape(4, 8 * 14 * 14)  # runs at batch 4 only

    spec = trace_module(FixedBatch(), torch.randn(4, 3, 16, 16))
    assert spec.traced is not None and spec.traced.kernels is None
    assert any("kernels of an eager step were not counted" in note for note in spec.notes)


def test_plain_mlp_activation_bytes_are_the_saved_inputs() -> None:
    d, batch = 32, 8
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    measured = measure_module(model, torch.randn(batch, d))

    # Saved for backward: the input of Linear 1 (B x d), the input of GELU (B x 4d) and the
    # input of Linear 2 (B x 4d); the weights are parameters, not activations. fp32.
    assert measured.activation_bytes == batch * (d + 4 * d + 4 * d) * 4
    spec = trace_module(model, torch.randn(batch, d))
    assert spec.traced is not None
    assert spec.traced.activation_bytes_per_sample == (d + 4 * d + 4 * d) * 4


def test_tied_weights_count_once() -> None:
    model = TinyGPT(SDPABlock)
    untied = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    measured = measure_module(model, tokens())

    assert measured.params == untied - VOCAB * DIM


# Built and traced in a child process, so that its peak memory is its own.
LLAMA_STACK_SCRIPT = """
import json, resource
import torch
from torch import nn
import torch.nn.functional as F
from computewise.models import measure_module


class LlamaLayer(nn.Module):
    # Llama-2-7B's layer shape: RMSNorm, attention through SDPA (no RoPE), SwiGLU.
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(hidden)
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.norm2 = nn.RMSNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        b, t, h = x.shape
        y = self.norm1(x)
        q, k, v = (p(y).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, h))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class LlamaStack(nn.Module):
    def __init__(self, layers, hidden=4096, heads=32, ffn=11008, vocab=32000):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LlamaLayer(hidden, heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


with torch.device("meta"):
    model = LlamaStack(layers=4)
m = measure_module(model, torch.zeros(1, 4096, dtype=torch.long))
# VmHWM is this process's own high-water mark; ru_maxrss would carry over the parent's across exec
# (Linux keeps it per process, not per address space), so a test worker grown large would read as the child.
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
peak = int(hwm[0].split()[1]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"params": m.params, "param_bytes": m.param_bytes, "flops": m.forward_flops,
                  "activation_bytes": m.activation_bytes, "peak_rss_bytes": peak}))
"""


def test_seven_billion_shape_on_meta_traces_without_real_memory() -> None:
    # Four Llama-2-7B layers plus embeddings hold 1.07B parameters: 4.3 GB in fp32 if real, and
    # a 4096-token forward would add gigabytes of activations. The child's peak RSS stays low.
    result = subprocess.run([sys.executable, "-c", LLAMA_STACK_SCRIPT], capture_output=True, text=True, check=True)
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    shape = ModelSpec(
        name="llama-2-7b x4",
        params=0,
        layers=4,
        hidden_size=4096,
        heads=32,
        kv_heads=32,
        ffn_size=11008,
        vocab_size=32000,
        gated_ffn=True,
    )

    assert measured["params"] == count_params(shape, FAMILIES["llama"])
    assert measured["param_bytes"] == 4 * measured["params"]
    assert measured["activation_bytes"] > 0
    assert measured["peak_rss_bytes"] < 1.5e9


def test_resnet50_reproduces_the_preset_figures() -> None:
    model = ResNet50()
    image = torch.randn(1, 3, 224, 224)
    measured = measure_module(model, image, kernels=True)
    resnet = preset("resnet-50")

    assert resnet.traced is not None
    assert measured.params == resnet.params == 25_557_032  # torchvision's published count
    assert measured.forward_flops == resnet.traced.forward_flops_per_sample
    assert measured.forward_flops == reference_forward_flops(model, image)
    # torchvision lists 4.09 GFLOPS, which are multiply-adds: 2 FLOPs each.
    assert measured.forward_flops == pytest.approx(2 * 4.09e9, rel=0.005)
    assert measured.activation_bytes == resnet.traced.activation_bytes_per_sample
    assert measured.kernels == resnet.traced.kernels
    assert measured.kernels is not None
    # torchvision's eval forward, counted from the architecture: 53 convolutions, 53 batch norms,
    # 49 ReLUs (one per bottleneck stage of 3 plus the stem's), 16 residual adds, max pool, mean, fc.
    assert measured.kernels.eval_kernels == 53 + 53 + 49 + 16 + 1 + 1 + 1
    assert measured.kernels.convolutions == 53
    # Training also bumps each batch norm's num_batches_tracked.
    assert measured.kernels.train_forward_kernels == measured.kernels.eval_kernels + 53


def _peak_bytes_of_a_real_forward(model: nn.Module, image: Any) -> int:
    """The most bytes the CPU allocator held at once during a real inference forward, beyond the input."""
    model.eval()
    with torch.no_grad():
        return _peak_bytes_of(lambda: model(image))


def _peak_bytes_of(work: Callable[[], Any]) -> int:
    """The most bytes the CPU allocator held at once while ``work`` ran, beyond what it held before: each
    allocation and free as the profiler records them, in time order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        work()
    live = peak = 0
    for event in sorted(recorded.events(), key=lambda event: event.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("network", ["conv-relu-conv", "resnet-50"])
def test_an_inference_forward_holds_what_a_real_one_allocates(network: str) -> None:
    """The trace's live peak (meta tensors, freed as Python drops them) against a real forward on the CPU."""
    if network == "resnet-50":
        model: nn.Module = ResNet50()
        image = torch.randn(2, 3, 224, 224)
    else:
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
        image = torch.randn(2, 3, 16, 16)
    measured = measure_module(model, image, kernels=True)
    assert measured.kernels is not None
    held = measured.kernels.eval_peak_bytes_per_sample * image.shape[0]
    assert held == _peak_bytes_of_a_real_forward(model, image) + image.numel() * image.element_size()
    if network == "resnet-50":  # an eighth of what a training step saves: each tensor freed after its next op
        assert held < measured.activation_bytes / 7


def test_a_resnet_training_step_allocates_what_estimate_train_says() -> None:
    """A real AdamW step of ResNet-50 on the CPU at batch 4, fp32 (its second, when the optimizer's states
    exist): the most bytes it holds, weights and states included, against ``estimate train``'s allocated
    peak for the preset (+1.6 %, +2.4 % and +3.2 % at batch 2, 4 and 8 on a 2-core AMD EPYC VM)."""
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions
    from computewise.estimate.single import estimate_train
    from computewise.specs import Parallelism, TrainJob

    batch = 4
    model = ResNet50()
    images, labels = torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    held_before = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers(), images))
    held_before += sum(
        t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values() if t.dim()
    )
    during = _peak_bytes_of(step)
    catalog = load_catalog()
    job = TrainJob(tokens=1e6, seq_len=1, micro_batch=batch, global_batch=batch, precision="fp32")
    estimate = estimate_train(
        preset("resnet-50"),
        catalog.accelerator("a100-80gb"),
        1,
        job,
        Parallelism(),
        catalog,
        Assumptions.from_catalog(catalog),
    )
    allocated = estimate.to_dict()["memory"]["allocated_peak_bytes"]
    assert allocated == pytest.approx(held_before + during, rel=0.05)


def test_kernel_bytes_are_what_each_kernel_reads_and_writes() -> None:
    """Conv (3 -> 8 channels, 3x3, padding 1) then ReLU on 4 x 3 x 16 x 16: counted by hand, per sample at fp32.
    The convolution reads its input and writes its output (its weights do not grow with the batch); the ReLU
    reads and writes the 8-channel map."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
    measured = measure_module(model, torch.randn(4, 3, 16, 16), kernels=True)
    assert measured.kernels is not None
    pixels = 16 * 16
    assert measured.kernels.eval_kernels == 2
    assert measured.kernels.eval_gemm_bytes_per_sample == 4 * pixels * (3 + 8)
    assert measured.kernels.eval_other_bytes_per_sample == 4 * pixels * (8 + 8)
    # Backward: ReLU's threshold_backward reads the gradient and the output, writes a gradient (3 maps of 8);
    # the convolution's backward reads the output gradient and the input, and (the input needing no gradient)
    # writes the weight and bias gradients only, which do not grow with the batch.
    assert measured.kernels.train_gemm_bytes_per_sample == 4 * pixels * (3 + 8) + 4 * pixels * (8 + 3)


def test_trace_module_returns_a_spec_with_per_sample_stats_and_both_flop_figures() -> None:
    model = TinyGPT(SDPABlock)
    spec = trace_module(model, tokens())
    measured = measure_module(model, tokens())

    assert spec.name == "TinyGPT"
    assert spec.source == "traced: TinyGPT"
    assert spec.architecture == "generic"
    assert spec.params == measured.params
    assert spec.traced is not None
    assert spec.traced.forward_flops_per_sample == measured.forward_flops_causal_aware / BATCH
    assert spec.traced.param_bytes == measured.param_bytes
    assert spec.traced.traced_dtype_bytes == 4
    assert any("PyTorch convention" in note for note in spec.notes)


def test_keyword_inputs_and_half_precision() -> None:
    class Keyword(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, *, features: Any) -> Any:
            return self.linear(features)

    model = Keyword().to(torch.bfloat16)
    measured = measure_module(model, {"features": torch.zeros(5, 8, dtype=torch.bfloat16)})

    assert measured.batch_size == 5
    assert measured.dtype_bytes == 2
    assert measured.param_bytes == (8 * 8 + 8) * 2
    assert measured.forward_flops == 2 * 5 * 8 * 8


def test_the_traced_module_is_left_untouched() -> None:
    model = TinyGPT(SDPABlock).eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    measure_module(model, tokens())

    assert not model.training
    assert all(not m.training for m in model.modules())
    for name, p in model.named_parameters():
        assert p.device.type == "cpu"
        assert p.grad is None
        assert torch.equal(p, before[name])


def test_hugging_face_style_config_fills_the_shape() -> None:
    class Config:
        def to_dict(self) -> dict[str, Any]:
            return {"model_type": "gpt2", "n_embd": DIM, "n_layer": LAYERS, "n_head": HEADS, "vocab_size": VOCAB}

    model = TinyGPT(SDPABlock)
    model.config = Config()  # type: ignore[assignment]
    spec = trace_module(model, tokens())

    assert (spec.layers, spec.hidden_size, spec.heads, spec.vocab_size) == (LAYERS, DIM, HEADS, VOCAB)
    assert spec.architecture == "decoder"
    assert spec.params == measure_module(model, tokens()).params
    assert spec.traced is not None and spec.traced.kernels is None  # the transformer formulas time it


def test_untraceable_inputs_are_model_config_errors() -> None:
    class ReadsValues(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return self.linear(x) * float(x.sum().item())

    with pytest.raises(ModelConfigError, match="cannot trace ReadsValues"):
        measure_module(ReadsValues(), torch.zeros(2, 4))
    with pytest.raises(ModelConfigError, match="no tensor"):
        measure_module(nn.Linear(4, 4), ("not a tensor",))
    with pytest.raises(ModelConfigError, match=r"not a torch\.nn\.Module"):
        measure_module(lambda x: x, torch.zeros(2, 4))


def test_sdpa_activations_grow_linearly_with_sequence_length() -> None:
    # The fused kernel saves q, k, v, output and log-sum-exp: O(seq). The math kernel would
    # save the seq x seq attention matrix, and doubling the sequence would more than double.
    class Attention(nn.Module):
        def forward(self, q: Any) -> Any:
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    def saved_bytes(seq: int) -> int:
        q = torch.randn(2, HEADS, seq, DIM // HEADS, requires_grad=True)
        return measure_module(Attention(), q).activation_bytes

    assert saved_bytes(512) == 2 * saved_bytes(256)
