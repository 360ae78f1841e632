"""GPT-2 124M on one GPU: naive FP32 training against the tuned configuration, tokens/s and MFU.

Method
------
The model is ``examples/tiny_gpt.py`` with its ``gpt2_124m`` preset (nanoGPT's shape: 12 layers,
12 heads, 768 wide, 1024 context, vocabulary 50304, tied head) on its synthetic tokens, trained
through ``computewise.train``'s ``StepEngine`` and ``make_loader``, as ``fit()`` and ``tune`` run
it. Every configuration keeps the same global batch (``--global-batch`` sequences a step, split
into micro-batches with gradient accumulation), so all of them do the same work per step.

- **naive**: FP32 (TF32 off: IEEE FP32 matmuls), no ``torch.compile``, the default for-each
  AdamW, the default loader, and the largest micro-batch that fits (tried from the global batch
  down, halving on out-of-memory): what a user gets without tuning.
- **tuned**: the space ``computewise tune`` searches, narrowed to what wins on a GPU: BF16
  autocast over FP32 master weights (TF32 for the matmuls autocast keeps in FP32), fused AdamW,
  and
  1. **micro-batch growth** as tune grows it (``computewise.tune.growth``): eager trials from
     ``--growth-start`` (default 8 on a GPU, tune's global / 32 on the CPU), doubling, then
     bisecting, until tune's memory model says the next size cannot fit, a trial runs out of
     memory, throughput stops improving, or the micro-batch is the whole global batch (the
     issue's 35.5 % stopped at 32 of a global 64, using 29.8 of 80 GB);
  2. **compilation** at the fastest size and the largest that fit, in the first of
     ``--compile-modes`` (default ``default,reduce-overhead``: CUDA graphs; add ``max-autotune``,
     whose kernel benchmarking takes minutes, where the time allows), the other modes at the
     largest size only (as tune tries them on its winner only); each with the loss compiled
     inside the model's graph (``compile_loss``, which tune tries too), so Inductor fuses the
     cross-entropy over the 50,304-wide logits. One more row compiles the model alone at the
     largest size in the first mode, the loss run eagerly on its logits, and the summary prints
     the ratio of the two. ``--micro-batches`` replaces the growth with a
     fixed list, compiled in the first mode; ``--config FILE`` adds the configuration
     ``computewise tune --out FILE`` wrote, so the benchmark measures what tune found.
  The fastest of all of them is the tuned row; growth trials are listed as ``growth``.

Each configuration runs ``--warmup`` steps first (timed separately: compilation happens there),
then ``--steps`` timed steps (growth trials half as many: they only rank sizes); the step time
is their median (CUDA-synchronized wall time, loading the micro-batches included).
tokens/s = global batch x context / step time.

MFU = model FLOPs per step / step time / the GPU's dense BF16 peak from the catalog (detected
from the device name, or ``--gpu SLUG``). Model FLOPs are the traced forward FLOPs of one
sequence (``computewise.models.trace``, PyTorch convention: causal attention counted in full)
x 3 for forward and backward, the count nanoGPT's ``estimate_mfu`` uses (6N + 12 L H Q T per
token), so the figure compares with the 37 % nanoGPT reports on an A100. Both rows are measured
against the BF16 peak, so the naive row says how much of the GPU plain FP32 leaves unused.

Targets (issue 29, one H100 80GB SXM): tuned >= 8x the naive tokens/s, and tuned MFU >= 45 %
(about 520K tokens/s). Exit status: 0 PASS, 1 FAIL, 2 no CUDA device (or bad arguments).
``--quick`` trains the tiny default model on the CPU (FP32, fused AdamW and the micro-batch
growth or sweep; compiled only where ``--compile-modes default`` asks): a smoke run for
``tests/benchmarks/test_train_gpu_quick.py``, with MFU n/a and no verdict.

Usage
-----
    python benchmarks/train_gpu.py                          # GPT-2 124M on the local GPU
    python benchmarks/train_gpu.py --markdown table.md      # the table for docs/
    python benchmarks/train_gpu.py --gpu h100-pcie          # when the device name is not detected
    python benchmarks/train_gpu.py --quick --json out.json  # tiny model on the CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast, get_args

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # examples.tiny_gpt, from any working directory

from examples.tiny_gpt import settings  # noqa: E402

from computewise.catalog import load_catalog  # noqa: E402
from computewise.errors import ComputewiseError  # noqa: E402
from computewise.estimate.assumptions import Assumptions  # noqa: E402
from computewise.models.trace import measure_module  # noqa: E402
from computewise.specs import Accelerator  # noqa: E402
from computewise.train.config import CompileMode, PrecisionChoice, TrainConfig, load_config  # noqa: E402
from computewise.train.data import make_loader  # noqa: E402
from computewise.train.engine import StepEngine  # noqa: E402
from computewise.train.setup import load_setup  # noqa: E402
from computewise.tune.growth import Growth, Probe, grow_micro_batch  # noqa: E402
from computewise.tune.prune import device_capacity, estimate_memory, profile_setup  # noqa: E402
from computewise.tune.space import DeviceKind  # noqa: E402

ENTRY = "examples.tiny_gpt:setup"
TARGET_RATIO = 8.0
TARGET_MFU = 0.45
GPU_GROWTH_START = 8  # the smallest of the old fixed list: GPT-2's smaller micro-batches only cost trials
GPU_COMPILE_MODES = "default,reduce-overhead"
GPU_GLOBAL_BATCH = 64  # 64 x 1024 = 65K tokens a step: long enough steps to time, short enough for FP32
NO_CUDA = "no CUDA device: run on a GPU, or add --quick (or --device cpu) for a smoke run on the CPU"


@dataclass(frozen=True)
class Workload:
    """The model and batch every configuration trains, and what one sequence costs."""

    name: str
    model_config: dict[str, Any]
    params: int
    global_batch: int
    tokens_per_sample: int
    flops_per_sample: float


@dataclass(frozen=True)
class Trial:
    """One configuration: measured (``status`` ok) or why not (oom, error)."""

    role: str  # naive, tuned (the fastest of the others), growth, candidate or "from tune"
    settings: str
    micro_batch_size: int
    status: str
    message: str | None = None
    warmup_s: float | None = None
    step_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_memory_bytes: int | None = None


def describe_workload(name: str, model_config: dict[str, Any]) -> Workload:
    """Build the setup once to count parameters and trace the FLOPs of one sequence (meta device: no compute)."""
    setup = load_setup(ENTRY, model_config)
    context = int(setup.tokens_per_sample or 1)
    measured = measure_module(setup.model, torch.zeros(1, context, dtype=torch.long))
    return Workload(
        name=name,
        model_config=model_config,
        params=measured.params,
        global_batch=setup.global_batch_size,
        tokens_per_sample=context,
        flops_per_sample=3.0 * measured.forward_flops,
    )


def release(device: torch.device) -> None:
    """Free what the last trial held and forget its compiled graphs, so the next one starts clean."""
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _run(workload: Workload, config: TrainConfig, device: torch.device, warmup: int, steps: int) -> tuple[float, ...]:
    """(warm-up seconds, median step seconds, peak allocated bytes or -1) of one configuration."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    setup = load_setup(ENTRY, workload.model_config)
    engine = StepEngine.prepare(setup, config, device=device)
    loader = make_loader(setup, config, engine.micro_batch_size, 0)

    def one_step() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        engine.step([next(loader) for _ in range(engine.accumulation_steps)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    warmup_s = sum(one_step() for _ in range(warmup))
    step_s = statistics.median(one_step() for _ in range(steps))
    peak_bytes = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
    return warmup_s, step_s, float(peak_bytes)


def measure(
    role: str,
    workload: Workload,
    config: TrainConfig,
    device: torch.device,
    warmup: int,
    steps: int,
    peak_flops: float | None,
) -> Trial:
    micro = config.micro_batch_size or workload.global_batch
    settings = config.describe()
    try:
        warmup_s, step_s, peak_bytes = _run(workload, config, device, warmup, steps)
    except torch.cuda.OutOfMemoryError as error:
        trial = Trial(role, settings, micro, "oom", str(error).splitlines()[0])
    except (RuntimeError, ComputewiseError) as error:  # a failed compile or kernel: reported, the rest still run
        trial = Trial(role, settings, micro, "error", f"{type(error).__name__}: {str(error).splitlines()[0]}")
    else:
        samples_per_s = workload.global_batch / step_s
        trial = Trial(
            role,
            settings,
            micro,
            "ok",
            warmup_s=warmup_s,
            step_s=step_s,
            tokens_per_s=samples_per_s * workload.tokens_per_sample,
            mfu=samples_per_s * workload.flops_per_sample / peak_flops if peak_flops else None,
            peak_memory_bytes=int(peak_bytes) if peak_bytes >= 0 else None,
        )
    # Outside the except blocks: the traceback (and the engine its frames hold) is gone by now.
    release(device)
    print(f"  {role} micro {micro}: {trial.status} {_ms(trial.step_s)}", file=sys.stderr, flush=True)
    return trial


def halvings(global_batch: int) -> list[int]:
    """The global batch, then halved while it still divides the batch: the naive user's retry ladder."""
    sizes = []
    micro = global_batch
    while micro >= 1 and global_batch % micro == 0:
        sizes.append(micro)
        if micro % 2:
            break
        micro //= 2
    return sizes


def naive_trial(workload: Workload, device: torch.device, warmup: int, steps: int, peak: float | None) -> Trial:
    """FP32, plain AdamW, default loader, the largest micro-batch that fits."""
    last: Trial | None = None
    for micro in halvings(workload.global_batch):
        last = measure(
            "naive", workload, TrainConfig(precision="fp32", micro_batch_size=micro), device, warmup, steps, peak
        )
        if last.status != "oom":
            return last
    if last is None:
        raise SystemExit("the global batch has no micro-batch to try")
    return last


def grow(
    workload: Workload, device: torch.device, start: int | None, warmup: int, steps: int, peak: float | None
) -> tuple[list[Trial], Growth]:
    """Tune's micro-batch growth of the eager tuned settings: tune's memory model skips sizes that cannot fit."""
    setup = load_setup(ENTRY, workload.model_config)
    profile = profile_setup(setup)
    assumptions = Assumptions.from_catalog(load_catalog())
    kind: DeviceKind = "cuda" if device.type == "cuda" else "cpu"
    capacity = device_capacity(kind, None)
    trials: list[Trial] = []

    def config_at(micro: int) -> TrainConfig:
        return tuned_config(device, micro, None, compile_loss=False)

    def fits(micro: int) -> bool:
        return estimate_memory(profile, config_at(micro), kind, assumptions).total_bytes <= capacity.bytes

    def probe(micro: int) -> Probe:
        trial = measure("growth", workload, config_at(micro), device, warmup, max(2, steps // 2), peak)
        trials.append(trial)
        if trial.status == "ok" and trial.step_s:
            return Probe("measured", workload.global_batch / trial.step_s, trial.step_s)
        return Probe("oom" if trial.status == "oom" else "failed", message=trial.message)

    return trials, grow_micro_batch(workload.global_batch, fits, probe, start)


def compiled_trials(
    workload: Workload,
    device: torch.device,
    micro_batches: list[int],
    modes: list[CompileMode],
    warmup: int,
    steps: int,
    peak: float | None,
) -> list[Trial]:
    """The tuned settings at each micro-batch, compiled in the first mode with the loss inside the graph (eager
    where ``modes`` is empty); the other modes at the largest size only, as tune tries them on its winner only;
    then ``loss_outside``'s configuration, the comparison that prices compile_loss."""
    if not modes or not micro_batches:
        settings = [tuned_config(device, micro, None, compile_loss=False) for micro in micro_batches]
    else:
        settings = [tuned_config(device, micro, modes[0], compile_loss=True) for micro in micro_batches]
        settings += [tuned_config(device, max(micro_batches), mode, compile_loss=True) for mode in modes[1:]]
        settings.append(loss_outside(device, micro_batches, modes))
    return [measure("candidate", workload, config, device, warmup, steps, peak) for config in settings]


def tuned_config(device: torch.device, micro: int, mode: CompileMode | None, *, compile_loss: bool) -> TrainConfig:
    """BF16 on a GPU, fused AdamW, compiled in ``mode`` (eager when None)."""
    return TrainConfig(
        precision=_precision(device),
        micro_batch_size=micro,
        compile=mode is not None,
        compile_mode=mode or "default",
        compile_loss=compile_loss,
        fused_optimizer=True,
    )


def loss_outside(device: torch.device, micro_batches: list[int], modes: list[CompileMode]) -> TrainConfig:
    """The model alone compiled, its loss run eagerly on the logits, at the largest size in the first mode."""
    return tuned_config(device, max(micro_batches), modes[0], compile_loss=False)


def loss_in_graph_gain(trials: list[Trial], outside: TrainConfig) -> float | None:
    """Tokens/s with the loss compiled with the model over ``outside`` (the model alone compiled), same settings."""
    rates = {trial.settings: trial.tokens_per_s for trial in trials if trial.status == "ok"}
    inside_rate, outside_rate = rates.get(replace(outside, compile_loss=True).describe()), rates.get(outside.describe())
    return inside_rate / outside_rate if inside_rate and outside_rate else None


def _model_settings(text: str) -> dict[str, Any]:
    """``--model``'s JSON object of tiny_gpt settings; anything else is a usage error (exit 2)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as failure:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({failure})") from failure
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of tiny_gpt settings")
    return value


def _precision(device: torch.device) -> PrecisionChoice:
    return "bf16" if device.type == "cuda" else "fp32"


def growth_line(growth: Growth) -> str:
    sizes = " -> ".join(
        f"{point.micro}" + ("" if point.outcome == "measured" else f" ({point.outcome})") for point in growth.points
    )
    return f"micro-batch growth: {sizes}; stopped: {growth.stopped}; fastest {growth.best}"


def peak_bf16_flops(device: torch.device, gpu: str | None) -> tuple[str, float | None]:
    """The catalog accelerator (named, or detected from the CUDA device) and its dense BF16 peak."""
    catalog = load_catalog()
    accelerator: Accelerator | None
    if gpu is not None:
        accelerator = catalog.accelerator(gpu)
    elif device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        accelerator = catalog.match_device(properties.name, float(properties.total_memory))
        if accelerator is None:
            return properties.name, None
    else:
        return "none (CPU: no catalog peak)", None
    return accelerator.name, accelerator.peak_flops_for("bf16")


def environment(device: torch.device, accelerator: str, peak: float | None) -> dict[str, Any]:
    cuda = device.type == "cuda"
    return {
        "device": torch.cuda.get_device_name(device) if cuda else f"CPU ({platform.machine()})",
        "catalog_accelerator": accelerator,
        "bf16_peak_flops": peak,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    for threshold, suffix in ((1e6, "M"), (1e3, "K")):
        if value >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _gb(n_bytes: int | None) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / 1e9:.1f} GB"


def summarize(
    naive: Trial,
    tuned: Trial | None,
    verdict_given: bool,
    growth: Growth | None = None,
    loss_gain: float | None = None,
) -> dict[str, Any]:
    ratio = (
        tuned.tokens_per_s / naive.tokens_per_s
        if tuned is not None and tuned.tokens_per_s and naive.tokens_per_s
        else None
    )
    mfu = tuned.mfu if tuned is not None else None
    lines = [
        f"tuned / naive tokens/s: {ratio:.2f}x (target >= {TARGET_RATIO:g}x)"
        if ratio is not None
        else "tuned / naive tokens/s: n/a (a configuration did not run)",
        f"tuned MFU against the BF16 dense peak: {_share(mfu)} (target >= {TARGET_MFU:.0%})",
        *([growth_line(growth)] if growth is not None else []),
        *([f"loss compiled with the model / the model alone compiled: {loss_gain:.3f}x tokens/s"] if loss_gain else []),
    ]
    verdict = None
    if verdict_given:
        verdict = (
            "PASS" if ratio is not None and ratio >= TARGET_RATIO and mfu is not None and mfu >= TARGET_MFU else "FAIL"
        )
        lines.append(f"verdict: {verdict}")
    else:
        lines.append("no verdict: CPU smoke run (the targets are for a GPU)")
    return {"ratio": ratio, "tuned_mfu": mfu, "loss_in_graph_gain": loss_gain, "verdict": verdict, "lines": lines}


def format_markdown(workload: Workload, trials: list[Trial], summary: dict[str, Any], env: dict[str, Any]) -> str:
    header = (
        f"### {workload.name} training: naive FP32 vs tuned\n\n"
        f"{env['device']} (catalog: {env['catalog_accelerator']}), torch {env['torch']}, CUDA {env['cuda'] or 'n/a'}, "
        f"{env['date']}. {workload.params / 1e6:.1f}M parameters, global batch {workload.global_batch} x "
        f"{workload.tokens_per_sample} tokens, model FLOPs {workload.flops_per_sample / 1e9:.3g} GFLOP a sequence "
        "(traced forward x 3).\n\n"
        "| configuration | settings | micro-batch | warm-up (incl. compile) | step (median) | tokens/s "
        "| MFU (BF16 peak) | peak memory |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for trial in trials:
        name = f"**{trial.role}**" if trial.role in ("naive", "tuned") else trial.role
        if trial.status != "ok":
            rows.append(
                f"| {name} | {trial.settings} | {trial.micro_batch_size} | {trial.status}: {trial.message} |||||"
            )
            continue
        rows.append(
            f"| {name} | {trial.settings} | {trial.micro_batch_size} | {_ms(trial.warmup_s)} | {_ms(trial.step_s)} "
            f"| {_count(trial.tokens_per_s)} | {_share(trial.mfu)} | {_gb(trial.peak_memory_bytes)} |"
        )
    return header + "\n".join(rows) + "\n\n" + "\n".join(f"- {line}" for line in summary["lines"]) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny model on the CPU: a smoke run, no verdict")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default cuda (cpu with --quick)")
    parser.add_argument("--gpu", metavar="SLUG", help="catalog accelerator for the BF16 peak (default: detected)")
    parser.add_argument(
        "--global-batch", type=int, default=None, help=f"sequences a step (GPU default {GPU_GLOBAL_BATCH})"
    )
    parser.add_argument(
        "--model",
        type=_model_settings,
        default={},
        metavar="JSON",
        help='tiny_gpt settings over the default model, e.g. \'{"n_layer": 2, "vocab_size": 50304}\'',
    )
    parser.add_argument(
        "--micro-batches", default=None, help="tuned candidates, comma-separated, instead of growing the micro-batch"
    )
    parser.add_argument(
        "--growth-start", type=int, default=None, help=f"first micro-batch grown (GPU default {GPU_GROWTH_START})"
    )
    parser.add_argument(
        "--compile-modes",
        default=None,
        help=f"torch.compile modes tried, comma-separated (default on a GPU {GPU_COMPILE_MODES}, also max-autotune; "
        "on the CPU none: name default to compile there)",
    )
    parser.add_argument("--no-compile", action="store_true", help="tune without torch.compile")
    parser.add_argument("--config", type=Path, metavar="FILE", help="also measure `computewise tune --out FILE`")
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first (default 5 on a GPU, 1 on the CPU)"
    )
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 20 on a GPU, 3 on the CPU)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the trials and the summary as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write the table for docs/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device or ("cpu" if args.quick else "cuda"))
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    steps = args.steps if args.steps is not None else (20 if cuda else 3)
    if warmup < 1 or steps < 1:
        print("--warmup and --steps must be >= 1", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    if cuda:
        name, model_config = (
            "GPT-2 124M",
            {"preset": "gpt2_124m", "global_batch": args.global_batch or GPU_GLOBAL_BATCH},
        )
    else:
        name, model_config = (
            "tiny_gpt (CPU smoke run)",
            {} if args.global_batch is None else {"global_batch": args.global_batch},
        )
    if args.model:
        name, model_config = f"{name}, with {json.dumps(args.model)}", {**model_config, **args.model}
        try:
            settings(model_config)
        except ValueError as refused:
            print(f"--model: {refused}", file=sys.stderr)
            return 2
    workload = describe_workload(name, model_config)
    modes_text = args.compile_modes if args.compile_modes is not None else (GPU_COMPILE_MODES if cuda else "")
    modes = [mode.strip() for mode in modes_text.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in get_args(CompileMode)]
    if unknown:
        print(
            f"unknown --compile-modes {','.join(unknown)}: choose from {', '.join(get_args(CompileMode))}",
            file=sys.stderr,
        )
        return 2
    candidates = None
    if args.micro_batches:
        candidates = [int(part) for part in args.micro_batches.split(",") if part.strip()]
        candidates = [
            micro for micro in candidates if 1 <= micro <= workload.global_batch and workload.global_batch % micro == 0
        ]
        if not candidates:
            print(f"no --micro-batches candidate divides the global batch {workload.global_batch}", file=sys.stderr)
            return 2
    accelerator, peak = peak_bf16_flops(device, args.gpu)
    env = environment(device, accelerator, peak)
    peak_text = f"{_count(peak)}FLOP/s" if peak else "n/a"
    print(f"{env['device']}  torch {env['torch']}  CUDA {env['cuda'] or 'n/a'}  BF16 peak {peak_text}", flush=True)

    naive = naive_trial(workload, device, warmup, steps, peak)
    compile_modes = cast(list[CompileMode], modes) if not args.no_compile else []
    growth = None
    candidates_run: list[Trial] = []
    if candidates is None:
        start = args.growth_start or (GPU_GROWTH_START if cuda else None)
        candidates_run, growth = grow(workload, device, start, warmup, steps, peak)
        # Without compilation the growth trials are the candidates (eager is what they measured).
        # Compiled at the fastest eager size and at the largest that fit: compilation removes the
        # overhead that made them equal, and at the whole global batch CUDA graphs need no accumulation.
        sizes = {size for size in (growth.best, growth.largest_fitting) if size is not None}
        candidates = sorted(sizes) if compile_modes else []
    else:
        compile_modes = compile_modes[:1]
    candidates_run += compiled_trials(workload, device, candidates, compile_modes, warmup, steps, peak)
    if args.config is not None:
        from_tune = measure("from tune", workload, load_config(args.config), device, warmup, steps, peak)
        candidates_run.append(from_tune)
    measured = [trial for trial in candidates_run if trial.status == "ok" and trial.tokens_per_s is not None]
    best = max(measured, key=lambda trial: trial.tokens_per_s or 0.0) if measured else None
    tuned = Trial(**(asdict(best) | {"role": "tuned"})) if best is not None else None
    trials = [naive, *([tuned] if tuned is not None else []), *(t for t in candidates_run if t is not best)]
    gain = None
    if compile_modes and candidates:
        gain = loss_in_graph_gain(candidates_run, loss_outside(device, candidates, compile_modes))
    summary = summarize(naive, tuned, verdict_given=cuda, growth=growth, loss_gain=gain)
    table = format_markdown(workload, trials, summary, env)
    print(table)
    if args.json:
        payload = {
            "environment": env,
            "workload": asdict(workload),
            "trials": [asdict(t) for t in trials],
            "growth": growth.to_dict() if growth is not None else None,
            "summary": summary,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    return 1 if summary["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
