"""Replay every measured GPU row against the current estimator, on the CPU: the H100 error table.

The rows are real runs on one H100 80GB SXM (``benchmarks/data/measured/h100-2026-11-26``, whose
README says how each file was made): the project's GPT/Llama ladder (``validate.json``: training
steps, inference prefill and decode, plain PyTorch under autocast), Hugging Face
``LlamaForCausalLM`` (``hf-llama/truth.jsonl``: training steps and prefill forwards) and GPT-2 124M
trained naive and compiled (``train.json``). Each row is re-estimated with exactly its shape and
code (``framework``, ``execution``) and compared with what was measured: step time, prefill and
decode time, allocated and reserved peak memory.

Fitted constants are fitted on the rows marked ``fit`` only (``FIT_ROWS``: one per host cost the
kernel model assumes); the summary reports the other rows apart. ``--fit`` re-fits those two host
costs by bisection on their rows and prints them; the catalog keeps what it printed.

``--track-record`` writes the error bands every estimate prints (``catalog/track_record.py``): these
rows for one GPU, the held-out published runs of ``benchmarks/accuracy.py`` for many nodes.

Usage:
    python benchmarks/replay_measured.py            # the table and the targets
    python benchmarks/replay_measured.py --json OUT  # rows as JSON
    python benchmarks/replay_measured.py --fit      # re-fit the host costs on FIT_ROWS
    python benchmarks/replay_measured.py --track-record src/computewise/catalog/data/track_record.csv
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from computewise.catalog import load_catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.models.resolve import resolve_model
from computewise.specs import Execution, Framework, InferJob, ModelSpec, Parallelism, TrainJob

MEASURED = Path(__file__).resolve().parent / "data" / "measured"
DATA = MEASURED / "h100-2026-11-26"
ACCELERATOR = "h100-sxm"


class MeasuredSet(NamedTuple):
    """One GPU's measured files: their folder, the catalog accelerator they ran on, and the prefix of
    their rows' names."""

    folder: Path
    accelerator: str
    prefix: str


H100_SET = MeasuredSet(DATA, ACCELERATOR, "")
# A second GPU, measured by benchmarks/gpu_suite.py and never fitted on: the ladder's quick rows and
# GPT-2 124M's trials.
H200_SET = MeasuredSet(MEASURED / "h200-2026-11-28", "h200", "h200 ")
# One row per fitted constant, each host-bound: the eager host cost on a decode of the ladder, the
# Hugging Face modules' on an HF prefill; what training adds to a forward kernel (recording) and
# what a backward kernel costs (autograd) on one HF training step with and without recompute.
FITS = (
    ("host_s_per_kernel_eager", "gpt-350m infer p512+64 b8 decode"),
    ("host_s_per_kernel_transformers", "hf llama-160m prefill p4096 b1"),
    ("host_s_per_kernel_recording", "hf llama-160m s1024 b4 full"),
    ("host_s_per_kernel_autograd", "hf llama-160m s1024 b4 none"),
)
FIT_ROWS = tuple(row for _, row in FITS)
TARGETS = {  # (median, worst) |error| over the rows not fitted; None: no worst target
    "train_s": (0.15, 0.30),
    "infer_s": (0.25, None),
    "allocated": (0.05, 0.10),
    "reserved": (0.10, None),
}


@dataclass(frozen=True)
class Case:
    """One measured figure set and the job that reproduces it."""

    name: str
    model: ModelSpec
    kind: str  # train, prefill or decode
    job: TrainJob | InferJob
    measured_s: float | None
    allocated: float | None = None
    reserved: float | None = None
    accelerator: str = ACCELERATOR


@dataclass(frozen=True)
class Replayed:
    case: Case
    estimated_s: float
    estimated_allocated: float
    estimated_reserved: float

    def error(self, metric: str) -> float | None:
        c = self.case
        pairs = {
            "time": (self.estimated_s, c.measured_s),
            "allocated": (self.estimated_allocated, c.allocated),
            "reserved": (self.estimated_reserved, c.reserved),
        }
        estimate, measured = pairs[metric]
        return None if not measured else estimate / measured - 1.0


def _ladder_cases(measured_set: MeasuredSet = H100_SET) -> list[Case]:
    from validate_gpu import GPU_SHAPES, model_spec

    folder, accelerator, prefix = measured_set
    cases = []
    for row in json.loads((folder / "validate.json").read_text())["rows"]:
        if row["status"] != "ok":
            continue
        spec = model_spec(GPU_SHAPES[row["name"].split()[0]])
        if row["kind"] == "train":
            job = TrainJob(
                tokens=float(row["batch"] * row["seq"]),
                seq_len=row["seq"],
                micro_batch=row["batch"],
                global_batch=row["batch"],
                precision=row["precision"],
                recompute=row["recompute"],
                framework="pytorch",
            )
            name = prefix + row["name"]
            measured = (row["measured_s"], row["allocated_bytes"], row["reserved_bytes"])
            cases.append(Case(name, spec, "train", job, *measured, accelerator=accelerator))
            continue
        infer = InferJob(batch=row["batch"], context_len=row["seq"], output_len=row["new_tokens"])
        name = prefix + row["name"]
        prefill = (row["measured_prefill_s"], row["allocated_bytes"])
        cases.append(Case(f"{name} prefill", spec, "prefill", infer, *prefill, accelerator=accelerator))
        decode = row["measured_decode_s_per_token"]
        cases.append(Case(f"{name} decode", spec, "decode", infer, decode, accelerator=accelerator))
    return cases


def _hf_cases() -> list[Case]:
    cases = []
    for line in (DATA / "hf-llama" / "truth.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("oom") or row.get("error"):
            continue
        spec = resolve_model(str(DATA / "hf-llama" / f"{row['model']}.config.json"))
        framework: Framework = "transformers"
        if row["kind"] == "train":
            b, s = row["micro_batch"], row["seq"]
            job: TrainJob | InferJob = TrainJob(
                tokens=float(b * s),
                seq_len=s,
                micro_batch=b,
                global_batch=b,
                recompute=row["recompute"],
                framework=framework,
            )
            name = f"hf {row['model']} s{s} b{b} {row['recompute']}"
            cases.append(Case(name, spec, "train", job, row["step_s"], row["peak_allocated"], row["peak_reserved"]))
        else:
            b, s = row["batch"], row["context"]
            job = InferJob(batch=b, context_len=s, output_len=1, framework=framework)
            name = f"hf {row['model']} prefill p{s} b{b}"
            cases.append(
                Case(name, spec, "prefill", job, row["prefill_s"], row["peak_allocated"], row["peak_reserved"])
            )
    return cases


def _gpt2_cases(measured_set: MeasuredSet = H100_SET) -> list[Case]:
    """GPT-2 124M (nanoGPT-style, flash attention, tied head) from ``train_gpu.py``: fp32 and bf16, eager, compiled
    and compiled with CUDA graphs."""
    folder, accelerator, prefix = measured_set
    data = json.loads((folder / "train.json").read_text())
    spec = _gpt2_spec(int(data["workload"]["params"]))
    cases = []
    for trial in data["trials"]:
        if trial["status"] != "ok":
            continue
        micro = trial["micro_batch_size"]
        compiled = "compile=True" in trial["settings"]
        graphs = "reduce-overhead" in trial["settings"]  # torch.compile recording CUDA graphs
        execution: Execution = "cuda-graphs" if graphs else "compile" if compiled else "eager"
        job = TrainJob(
            tokens=64.0 * 1024,
            seq_len=1024,
            micro_batch=micro,
            global_batch=64,
            precision="bf16" if "bf16" in trial["settings"] else "fp32",
            framework="pytorch",
            execution=execution,
            # tiny_gpt's setup.loss calls cross_entropy on the model's logits: inside the compiled graph only
            # under compile_loss, and otherwise eager's passes over them even when the model is compiled.
            loss="standard" if "compile_loss=True" in trial["settings"] else "eager",
        )
        how = "naive" if trial["role"] == "naive" else "cuda-graphs" if graphs else "compiled" if compiled else "eager"
        name = f"{prefix}gpt2-124m {how} {job.precision} mb{micro}"
        cases.append(Case(name, spec, "train", job, trial["step_s"], accelerator=accelerator))
    return cases


def _gpt2_spec(params: int) -> ModelSpec:
    return ModelSpec(
        name="gpt2-124m",
        params=params,
        architecture="decoder",
        layers=12,
        hidden_size=768,
        heads=12,
        kv_heads=12,
        ffn_size=3072,
        vocab_size=50304,
        tied_embeddings=True,
        gated_ffn=False,
        max_seq_len=1024,
        source="benchmarks/train_gpu.py (GPT-2 124M, vocabulary padded to 50304)",
    )


def cases() -> list[Case]:
    return [*_ladder_cases(), *_hf_cases(), *_gpt2_cases(), *_ladder_cases(H200_SET), *_gpt2_cases(H200_SET)]


def replay(case: Case, assumptions: Assumptions) -> Replayed:
    catalog = load_catalog()
    accelerator = catalog.accelerator(case.accelerator)
    if isinstance(case.job, TrainJob):
        train = estimate_train(case.model, accelerator, 1, case.job, Parallelism(), catalog, assumptions)
        memory = train.memory_per_device
        seconds = float(train.columns.step_s.reshape(-1)[0])
    else:
        infer = estimate_infer(case.model, accelerator, case.job, catalog, assumptions)
        memory = infer.memory_per_device
        column = infer.columns.prefill_s if case.kind == "prefill" else infer.columns.decode_step_s
        seconds = float(column.reshape(-1)[0])
    return Replayed(case, seconds, memory["allocated_peak"], memory["reserved_peak"])


def _group(r: Replayed) -> str:
    return "train_s" if r.case.kind == "train" else "infer_s"


def summarize(rows: list[Replayed]) -> tuple[list[str], bool]:
    """Median and worst |error| per figure over the rows not fitted, against ``TARGETS``."""
    held = [r for r in rows if r.case.name not in FIT_ROWS]
    lines, ok = [], True
    for metric, (median_target, worst_target) in TARGETS.items():
        if metric in ("train_s", "infer_s"):
            errors = [abs(e) for r in held if _group(r) == metric and (e := r.error("time")) is not None]
        else:
            errors = [abs(e) for r in held if (e := r.error(metric)) is not None]
        if not errors:
            continue
        median, worst = statistics.median(errors), max(errors)
        passed = median <= median_target and (worst_target is None or worst <= worst_target)
        ok = ok and passed
        target = f"median <= {median_target:.0%}" + (f", worst <= {worst_target:.0%}" if worst_target else "")
        lines.append(
            f"{metric}: median {median:.1%}, worst {worst:.1%} over {len(errors)} rows ({target}): "
            + ("pass" if passed else "FAIL")
        )
    return lines, ok


def _band(errors: list[float]) -> tuple[int, float, float]:
    return len(errors), round(statistics.median(errors), 3), round(max(errors), 3)


def _torchtitan_memory_error(assumptions: Assumptions) -> float:
    """The one published memory figure of a one-node job: 82.4 GiB reserved (torchtitan's Table 1;
    ``tests/estimate/test_published.py`` holds the same check)."""
    from computewise.models.presets import preset

    catalog = load_catalog()
    job = TrainJob(
        tokens=1e9, seq_len=8192, micro_batch=2, global_batch=16, recompute="op-selective", framework="pytorch"
    )
    spec, h100 = preset("llama-3-8b"), catalog.accelerator("h100-sxm")
    train = estimate_train(spec, h100, 8, job, Parallelism(dp=8, zero=3), catalog, assumptions)
    return train.memory_per_device["reserved_peak"] / (82.4 * 2**30) - 1.0


def track_record_csv(rows: list[Replayed]) -> str:
    """The bands of ``catalog/data/track_record.csv``: one GPU from these rows (held out), one node, many
    nodes and mixture-of-experts models from the published runs held out of ``benchmarks/accuracy.py``'s fit."""
    import accuracy
    from computewise.catalog.track_record import COLUMNS, SCOPES, scope_for

    held = [r for r in rows if r.case.name not in FIT_ROWS]
    gpus = f"benchmarks/replay_measured.py: one H100 SXM ({DATA.name}) or one H200 ({H200_SET.folder.name})"
    gpus += ", rows not fitted on"
    lines = [",".join(COLUMNS)]
    for kind in ("train", "infer"):
        picked = [r for r in held if (r.case.kind == "train") == (kind == "train")]
        for figure, metric in (("time", "time"), ("memory", "allocated")):
            errors = [abs(e) for r in picked if (e := r.error(metric)) is not None]
            n, median, worst = _band(errors)
            lines.append(f'single-gpu,{kind},{figure},{n},{median},{worst},"{gpus}"')
    assumptions = Assumptions.from_catalog(load_catalog())
    n, median, worst = _band([abs(_torchtitan_memory_error(assumptions))])
    source = "torchtitan docs/performance.md Table 1: Llama 3.1 8B, FSDP on 8 H100s, op-level selective checkpointing"
    lines.append(f'one-node,train,memory,{n},{median},{worst},"{source}"')
    runs = accuracy.load_runs()
    results = accuracy.table(runs, assumptions)
    catalog = load_catalog()
    kinds = {slug: catalog.accelerator(slug).kind for slug in {run.accelerator for run in runs}}
    run_scopes = [scope_for(run.gpus, run.node_devices, run.model.experts, kinds[run.accelerator]) for run in runs]
    scopes = [scope for scope in SCOPES if scope in run_scopes]
    for scope in scopes:
        held_out = [r for s, r in zip(run_scopes, results, strict=True) if r.role == "check" and s == scope]
        n, median, worst = _band([abs(r.error) for r in held_out])
        source = "benchmarks/accuracy.py: published runs held out of the fit (docs/ACCURACY.md)"
        lines.append(f'{scope},train,time,{n},{median},{worst},"{source}"')
    for scope in scopes:  # every published run ran, fitted on or not: its layout fit
        published = [r for s, r in zip(run_scopes, results, strict=True) if s == scope]
        over = round(sum(not r.fits for r in published) / len(published), 3)
        source = "benchmarks/accuracy.py: published layouts, each of which ran (docs/ACCURACY.md)"
        lines.append(f'{scope},train,fits,{len(published)},{over},{over},"{source}"')
    return "\n".join(lines) + "\n"


def _fit(all_cases: list[Case], assumptions: Assumptions) -> Assumptions:
    """Bisect each host cost until its fit row's time matches (the time grows with the cost), in turns
    until the costs settle: the two HF rows share both of their costs."""
    by_name = {c.name: c for c in all_cases}
    for _ in range(8):
        for field, row in FITS:
            low, high = 0.0, 1e-3
            for _ in range(40):
                mid = (low + high) / 2
                replayed = replay(by_name[row], dataclasses.replace(assumptions, **{field: mid}))
                error = replayed.error("time") or 0.0
                low, high = (mid, high) if error < 0 else (low, mid)
            assumptions = dataclasses.replace(assumptions, **{field: (low + high) / 2})
    for field, row in FITS:
        print(f"{field} = {getattr(assumptions, field):.3g} s (fitted on {row})")
    return assumptions


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--fit", action="store_true", help="re-fit the host costs on FIT_ROWS first")
    parser.add_argument("--track-record", type=Path, help="write the error bands estimates print here")
    args = parser.parse_args(argv)
    assumptions = Assumptions.from_catalog(load_catalog())
    all_cases = cases()
    if args.fit:
        assumptions = _fit(all_cases, assumptions)
    rows = [replay(c, assumptions) for c in all_cases]
    print(f"{'row':<44} {'est ms':>9} {'meas ms':>9} {'time':>8} {'alloc':>8} {'rsv':>8}")
    for r in rows:
        mark = " (fit)" if r.case.name in FIT_ROWS else ""
        measured = r.case.measured_s or 0.0
        print(
            f"{r.case.name + mark:<44} {r.estimated_s * 1e3:>9.2f} {measured * 1e3:>9.2f} "
            f"{_pct(r.error('time')):>8} {_pct(r.error('allocated')):>8} {_pct(r.error('reserved')):>8}"
        )
    lines, ok = summarize(rows)
    print("\n".join(lines))
    if args.track_record:
        args.track_record.write_text(track_record_csv(rows))
    if args.json:
        payload = [
            {
                "name": r.case.name,
                "kind": r.case.kind,
                "fit": r.case.name in FIT_ROWS,
                "estimated_s": r.estimated_s,
                "measured_s": r.case.measured_s,
                "time_error": r.error("time"),
                "allocated_error": r.error("allocated"),
                "reserved_error": r.error("reserved"),
            }
            for r in rows
        ]
        args.json.write_text(json.dumps({"rows": payload, "summary": lines}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
