"""``computewise plan train|infer|compare-onprem``: search the catalog under a deadline or a budget."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import (
    CatalogOption,
    FineTuneFlags,
    FlagGroup,
    HtmlOption,
    JsonOption,
    ModelOption,
    OptimizerOption,
    SeqLenOption,
    TokensOption,
    bounded_float,
    bounded_int,
    choice,
    emit,
    flag_groups,
    load,
    model,
    sequence_length,
    training_tokens,
)
from computewise.errors import InputError
from computewise.specs import OPTIMIZERS, PRECISIONS, PRICINGS, ModelSpec
from computewise.units import parse_bytes, parse_duration_s, parse_positive_int, parse_usd

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.plan import TrainConstraints

app = typer.Typer(help="Search accelerators, layouts and prices for the best way to run a job.", no_args_is_help=True)

GpuFilter = Annotated[list[str] | None, typer.Option("--gpu", "-g", help="Only these accelerators (repeatable).")]
CloudFilter = Annotated[list[str] | None, typer.Option("--cloud", help="Only these clouds (repeatable).")]
RegionFilter = Annotated[list[str] | None, typer.Option("--region", help="Only these regions (repeatable).")]
TopOption = Annotated[
    int, typer.Option("--top", parser=bounded_int("--top"), help="Candidates to show; 0 shows every feasible one.")
]


# plan.train.DEFAULT_MAX_GPUS, spelled out so `--help` need not import numpy (a test keeps them equal).
_DEFAULT_MAX_GPUS = 512
_PLAN_PROMPT_TOKENS = 512  # plan infer's request when --input-len is not given
_PLAN_OUTPUT_TOKENS = 128
_PromptTokens = Annotated[
    str | None, typer.Option(help="Prompt tokens per request (default 512), or an encoder's per input.")
]
_OutputTokens = Annotated[
    str | None, typer.Option(help="Generated tokens per request (default 128; not for encoders and images).")
]

# The flags of plan train, one type each, so the verb's signature reads in a screen.
_GlobalBatch = Annotated[
    str | None, typer.Option(help="Sequences per optimizer step. Default: 1M tokens at 8B, growing with the model.")
]
_Deadline = Annotated[str | None, typer.Option(help="Finish within: 72h, 3d, 90min.")]
_Budget = Annotated[str | None, typer.Option(help="Spend at most: 5000, $2.5k.")]
_MaxGpus = Annotated[
    int,
    typer.Option(
        parser=bounded_int("--max-gpus"),
        help="Largest number of accelerators to consider; raise it for frontier runs (up to 1,000,000).",
    ),
]
_Optimize = Annotated[str, typer.Option(help="Rank by cost (under the deadline) or time.")]
_Calibration = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="A calibration file from `computewise bench --save` for one accelerator "
        "(default: those saved in the user catalog).",
    ),
]
_DataRegion = Annotated[
    str | None,
    typer.Option(
        "--data-region",
        help="Where the dataset lives, cloud:region (aws:us-east-1): GPUs elsewhere add egress and copy time.",
    ),
]
_DatasetSize = Annotated[
    str | None, typer.Option("--dataset-size", help="Bytes to move with --data-region: 2TB, 500GiB.")
]
_Methods = Annotated[
    str,
    typer.Option(
        "--method",
        help="What trains: full, lora, qlora, or several to compare (lora,qlora,full): the cheapest wins.",
    ),
]


@dataclass(frozen=True)
class _Offerings(FlagGroup):
    """The offerings plan train weighs: accelerators, clouds, regions, pricings and precisions."""

    gpu: GpuFilter = None
    cloud: CloudFilter = None
    region: RegionFilter = None
    spot: Annotated[bool, typer.Option("--spot", help="Only spot prices (default: every --pricing).")] = False
    no_spot: Annotated[bool, typer.Option("--no-spot", help="Never spot prices.")] = False
    pricing: Annotated[list[str] | None, typer.Option(help="Pricing models to consider (repeatable).")] = None
    precision: Annotated[
        list[str] | None,
        typer.Option(
            help="Precisions to consider (repeatable; fp8 is opt-in; fp16 beside bf16 only on chips without bf16)."
        ),
    ] = None

    def narrow(self, constraints: TrainConstraints, catalog: Catalog) -> TrainConstraints:
        """``constraints`` searching only these offerings, each name checked against the catalog."""
        from computewise.plan import TRAIN_PRECISIONS
        from computewise.plan.train_request import offered_pricings

        pricings = tuple(choice(p, PRICINGS, "--pricing") for p in self.pricing or ())
        return dataclasses.replace(
            constraints,
            accelerators=tuple(catalog.accelerator(name).slug for name in self.gpu or ()),
            clouds=tuple(catalog.cloud(c) for c in self.cloud or ()),
            regions=tuple(catalog.region(r) for r in self.region or ()),
            pricings=offered_pricings(pricings, spot=self.spot, no_spot=self.no_spot),
            precisions=tuple(choice(p, PRECISIONS, "--precision") for p in self.precision or TRAIN_PRECISIONS),
        )


@app.command("train")
@flag_groups
def plan_train(
    *,
    model_name: ModelOption,
    tokens: TokensOption = None,
    seq_len: SeqLenOption = None,
    global_batch: _GlobalBatch = None,
    optimizer: OptimizerOption = "adamw",
    deadline: _Deadline = None,
    budget: _Budget = None,
    max_gpus: _MaxGpus = _DEFAULT_MAX_GPUS,
    offerings: _Offerings,
    optimize: _Optimize = "cost",
    top: TopOption = 10,
    catalog_paths: CatalogOption = None,
    calibration: _Calibration = None,
    data_region: _DataRegion = None,
    dataset_size: _DatasetSize = None,
    methods: _Methods = "full",
    finetune: FineTuneFlags,
    tp_overlap: Annotated[
        bool,
        typer.Option(
            help="Plan tensor-parallel layouts with their collectives hidden behind the GEMMs (Transformer Engine's "
            "userbuffers, Megatron's --tp-comm-overlap, as NVIDIA's Llama 3 70B and 405B recipes run); off: exposed."
        ),
    ] = False,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Recommended configuration, cost-vs-time Pareto frontier, and every rejected option with its reason."""
    from computewise.catalog.calibration import calibration_catalog_paths, load_calibration
    from computewise.estimate.train import default_global_batch
    from computewise.plan import TrainConstraints
    from computewise.plan.train_request import TrainRequest, dataset_site, plan_train_request
    from computewise.report.html import plan_html
    from computewise.report.terminal import print_plan

    catalog, assumptions = load([*(catalog_paths or ()), *calibration_catalog_paths(calibration)])
    spec = model(model_name)
    seq = sequence_length(seq_len, spec)
    batch = None if global_batch is None else parse_positive_int(global_batch, "--global-batch")
    dataset_bytes = None if dataset_size is None else parse_bytes(dataset_size, "--dataset-size")
    constraints = TrainConstraints(
        tokens=training_tokens(tokens, spec),
        seq_len=seq,
        global_batch=batch or default_global_batch(seq, spec.params, architecture=spec.architecture),
        optimizer=choice(optimizer, OPTIMIZERS, "--optimizer"),
        deadline_s=None if deadline is None else parse_duration_s(deadline, "--deadline"),
        budget_usd=None if budget is None else parse_usd(budget, "--budget"),
        max_gpus=max_gpus,
        objective=choice(optimize, ("cost", "time"), "--optimize"),
        data=dataset_site(catalog, data_region, dataset_bytes),
        methods=finetune.specs(methods),
        tp_overlap=tp_overlap,
    )
    measured = None if calibration is None else load_calibration(calibration)
    request = TrainRequest(spec, offerings.narrow(constraints, catalog), measured, top or None, batch is None)
    emit(plan_train_request(request, catalog, assumptions), as_json, html, print_plan, plan_html)


@app.command("infer")
def infer(
    model_name: ModelOption,
    rps: Annotated[
        float, typer.Option("--peak-rps", "--rps", parser=bounded_float("--peak-rps"), help="Peak requests per second.")
    ],
    mean_rps: Annotated[
        float | None,
        typer.Option(parser=bounded_float("--mean-rps"), help="Mean requests per second (for scale-to-zero)."),
    ] = None,
    input_len: _PromptTokens = None,
    output_len: _OutputTokens = None,
    latency: Annotated[
        str | None,
        typer.Option("--max-latency", "--latency", help="Latency target per request, first token to last: 2s, 500ms."),
    ] = None,
    utilization: Annotated[
        float | None,
        typer.Option(
            "--target-utilization",
            "--utilization",
            parser=bounded_float("--target-utilization"),
            help="Target replica utilization at peak (default: the catalog's serving_target_utilization).",
        ),
    ] = None,
    gpu: GpuFilter = None,
    cloud: CloudFilter = None,
    region: RegionFilter = None,
    precision: Annotated[list[str] | None, typer.Option(help="Precisions to consider (repeatable).")] = None,
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")] = "on-demand",
    top: TopOption = 10,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Accelerator and replica count for a traffic level, $ per 1000 requests, always-on vs scale-to-zero."""
    from computewise.plan import CLOUD_PRICINGS, INFER_PRECISIONS, InferConstraints, plan_infer
    from computewise.report.html import plan_html
    from computewise.report.terminal import print_plan
    from computewise.specs import PRECISIONS

    catalog, assumptions = load(catalog_paths)
    spec = model(model_name)
    prompt, generated = _request_tokens(spec, input_len, output_len)
    constraints = InferConstraints(
        requests_per_s=rps,
        input_len=prompt,
        output_len=generated,
        latency_s=parse_duration_s(latency, "--max-latency") if latency is not None else None,
        mean_requests_per_s=mean_rps,
        target_utilization=utilization,
        precisions=tuple(choice(p, PRECISIONS, "--precision") for p in precision or INFER_PRECISIONS),
        accelerators=tuple(catalog.accelerator(name).slug for name in gpu or ()),
        clouds=tuple(catalog.cloud(c) for c in cloud or ()),
        regions=tuple(catalog.region(r) for r in region or ()),
        pricing=choice(pricing, CLOUD_PRICINGS, "--pricing"),
    )
    result = plan_infer(spec, catalog, assumptions, constraints)
    emit(replace(result, top=top or None), as_json, html, print_plan, plan_html)


def _request_tokens(spec: ModelSpec, input_len: str | None, output_len: str | None) -> tuple[int, int]:
    """(prompt, generated) tokens of a request: the flags, else plan infer's defaults; refused for a model that
    generates nothing, which would ignore them (as estimate infer refuses them)."""
    from computewise.estimate.request import refuse_token_flags

    prompt = None if input_len is None else parse_positive_int(input_len, "--input-len")
    generated = None if output_len is None else parse_positive_int(output_len, "--output-len")
    refuse_token_flags(spec, prompt, generated, batched=False)
    return (
        _PLAN_PROMPT_TOKENS if prompt is None else prompt,
        _PLAN_OUTPUT_TOKENS if generated is None else generated,
    )


@app.command("compare-onprem")
def compare_onprem_cmd(
    gpu: GpuFilter = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Utilization above which owning a server beats renting the same accelerators."""
    import json
    import sys

    from computewise.plan import compare_onprem
    from computewise.report.html import break_even_html, write_html
    from computewise.report.terminal import print_break_even

    catalog, _ = load(catalog_paths)
    rows = compare_onprem(catalog, tuple(catalog.accelerator(name).slug for name in gpu or ()))
    if not rows:
        raise InputError("no on-premises server in the catalog matches", "drop --gpu or add rows to onprem.csv")
    if html is not None:
        write_html(html, break_even_html(rows))
    if as_json:
        sys.stdout.write(json.dumps({"break_even": [r.to_dict() for r in rows]}, indent=2) + "\n")
    else:
        from rich.console import Console

        print_break_even(rows, Console())
        if html is not None:
            Console(stderr=True).print(f"wrote {html}", highlight=False, markup=False)
