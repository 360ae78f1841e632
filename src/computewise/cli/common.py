"""What every verb shares: loading the catalog, reading the model, printing JSON, Rich or HTML."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, get_type_hints

import typer

from computewise.errors import ComputewiseError, InputError
from computewise.limits import ACCELERATOR_SHARE

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from computewise.catalog import Catalog
    from computewise.estimate import Assumptions
    from computewise.estimate.quote import PriceRequest
    from computewise.ledger import Ledger
    from computewise.limits import Limit
    from computewise.scale.job_request import JobRequest
    from computewise.specs import FineTune, ModelSpec

Choice = TypeVar("Choice", bound=str)

CatalogOption = Annotated[
    list[Path] | None,
    typer.Option("--catalog", help="Extra catalog CSV file or directory; its rows override bundled ones."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
HtmlOption = Annotated[
    Path | None, typer.Option("--html", help="Also write a self-contained HTML report with plots to FILE.")
]
TokensOption = Annotated[
    str | None, typer.Option(help="Training tokens: 1e10, 10B, 300000000. Default 20 per parameter.")
]
SeqLenOption = Annotated[str | None, typer.Option(help="Sequence length. Default: the model's, at most 4096.")]
OptimizerOption = Annotated[
    str,
    typer.Option(
        help="adamw, adam, sgd, adam8bit, or bitsandbytes' paged-adamw and paged-adam8bit (states paged to host RAM)."
    ),
]
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Ledger database: a SQLAlchemy URL (sqlite:///runs.db, postgresql://user@host/db) or a file path. "
        "Default: $COMPUTEWISE_DB, else a SQLite file in your user data directory.",
    ),
]
ModelOption = Annotated[
    str, typer.Option("--model", "-m", help="Preset name, path to a config.json, or a parameter count (7.5B).")
]
# --eval of optimize and distill, which grade the same way; each ends it with what 'agreement' compares against.
EVAL_HELP = "package.module:function called as fn(predict) -> float (higher is better), or 'agreement' with "


# One concept, one flag in every verb (issue 27): each old spelling (key) still parses, for one release,
# beside its new name (value), but help shows only the new one (`computewise.cli.app.conventional_help`).
RENAMED_FLAGS: dict[str, str] = {
    "--accelerator": "--gpu",
    "--batch": "--batch-size",
    "--context-len": "--input-len",
    "--latency": "--max-latency",
    "--rps": "--peak-rps",
    "--utilization": "--target-utilization",
}


@dataclass(frozen=True)
class PriceFlags:
    """The pricing flags of ``computewise run`` as typed, turned into a ``PriceRequest`` (errors name the flag)."""

    hourly_usd: str | None
    instance: str | None
    cloud: str | None
    region: str | None
    pricing: str

    def request(self) -> PriceRequest:
        from computewise.estimate.quote import PriceRequest
        from computewise.specs import PRICINGS, Pricing
        from computewise.units import parse_usd

        cloud_pricings: tuple[Pricing, ...] = tuple(p for p in PRICINGS if p != "on-prem")
        return PriceRequest(
            hourly_usd=parse_usd(self.hourly_usd, "--hourly-usd") if self.hourly_usd is not None else None,
            instance_type=self.instance,
            cloud=self.cloud,
            region=self.region,
            pricing=choice(self.pricing, cloud_pricings, "--pricing"),
        )


def load(catalog_paths: list[Path] | None) -> tuple[Catalog, Assumptions]:
    from computewise.catalog import load_catalog
    from computewise.estimate import Assumptions

    catalog = load_catalog(tuple(catalog_paths or ()))
    return catalog, Assumptions.from_catalog(catalog)


def print_error(error: ComputewiseError) -> None:
    """``error: ...`` and ``To fix: ...`` on stderr: how every user error reads.

    Lines are never broken by the printer (``soft_wrap``): a path or a command in a message must stay
    whole to be copied, and a terminal folds long lines by itself. Rich is imported here, not at the
    top: the verbs that print nothing else (``dashboard``) start a twentieth of a second sooner."""
    from rich.console import Console
    from rich.markup import escape

    stderr = Console(stderr=True, emoji=False)  # a message echoes what the user typed: `x:factory` stays text
    stderr.print(f"[bold red]error:[/] {escape(error.message)}", highlight=False, soft_wrap=True)
    if error.hint:
        stderr.print(f"[bold]To fix:[/] {escape(error.hint)}", highlight=False, soft_wrap=True)


def open_ledger(url: str | None, *, create: bool = False) -> Ledger:
    """Open the ledger and mark as crashed the runs whose monitor died without saying so (SIGKILL, power loss).

    Only verbs that record something pass ``create=True``; a verb that reads never makes a ledger (or a
    directory) out of a mistyped ``--db``.
    """
    import socket
    import time

    from rich.console import Console

    from computewise.ledger import Ledger

    ledger = Ledger.open(url, create=create)
    change = ledger.schema_change
    if change is not None and change.from_revision is not None:
        backup = f"; the previous file is kept at {change.backup}" if change.backup else ""
        Console(stderr=True).print(
            f"computewise: migrated the ledger {ledger.url} from schema {change.from_revision} "
            f"to {change.to_revision}{backup}",
            highlight=False,
            markup=False,
            emoji=False,
        )
    ledger.mark_crashed(time.time(), socket.gethostname())
    return ledger


def model(text: str) -> ModelSpec:
    from computewise.models import resolve_model

    return resolve_model(text)


class Document(Protocol):
    """A typed result that writes its own ``--json`` document."""

    def to_dict(self) -> dict[str, Any]: ...


# What a verb prints: its typed result (the printers read it; ``to_dict`` is called only for ``--json``), or,
# for verbs not moved yet, the ``--json`` dict itself.
Shown = TypeVar("Shown", bound="Document | dict[str, Any]")


def emit(
    data: Shown,
    as_json: bool,
    html_path: Path | None,
    show: Callable[[Shown, Console], None],
    to_html: Callable[[Shown], str],
) -> None:
    """JSON to stdout for scripts, or Rich tables for people; the HTML report is written either way."""

    if html_path is not None:
        from computewise.report.html import write_html

        write_html(html_path, to_html(data))
    print_document(data, as_json, show, () if html_path is None else (html_path,))


def print_document(
    data: Shown, as_json: bool, show: Callable[[Shown, Console], None], written: Sequence[Path] = ()
) -> None:
    """``data`` as JSON, or shown as tables followed by a ``wrote FILE`` line for each file written beside it."""
    from rich.console import Console

    if as_json:
        emit_json(data if isinstance(data, dict) else data.to_dict())
        return
    show(data, Console())
    for path in written:
        wrote(path)


def emit_json(data: object) -> None:
    """The one way a ``--json`` document reaches stdout: indented by two, one newline after it.

    Plain stdout, not Rich: Rich wraps long lines, which would break the JSON for a parser."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def wrote(path: Path | str) -> None:
    """``wrote FILE`` on stderr, after the tables, for each file a verb wrote beside them."""
    from rich.console import Console

    Console(stderr=True).print(f"wrote {path}", highlight=False, markup=False, emoji=False)


def bounded_float(flag: str, limit: Limit | None = None) -> Callable[[str | float], float]:
    """Typer ``parser=`` for a flag typed as a number: its range from ``limits.FLAG_LIMITS`` (or ``limit``).

    Typer alone would take ``--rate 1e30`` or ``--port 99999``; through this, a value out of range, or empty,
    is an ``InputError`` that names the flag, its range and why (exit 2).
    """
    from computewise.units import parse_flag_number

    return lambda text: parse_flag_number(text, flag, limit)


def bounded_int(flag: str, limit: Limit | None = None) -> Callable[[str | int], int]:
    """``bounded_float`` for a whole number (ports, counts of replicas, threads, steps)."""
    from computewise.units import parse_flag_number

    return lambda text: int(parse_flag_number(text, flag, limit))


def whole_numbers(text: str, flag: str) -> tuple[int, ...]:
    """A comma-separated flag ('1,8,32'): each number in the flag's range, sorted, without repeats."""
    from computewise.units import parse_flag_number

    parts = [part for part in text.split(",") if part.strip()] or [""]  # nothing at all reads as empty
    return tuple(sorted({int(parse_flag_number(part, flag)) for part in parts}))


def refuse_option_as_command(command: list[str], verb: str) -> None:
    """``run`` and ``submit`` pass every word after their last known option to the command, so a
    mistyped or renamed option (``--backend``, now ``--engine``) would become the program to start:
    refuse a command whose first word is an option instead of running or submitting it."""
    if command and command[0].startswith("-"):
        raise InputError(
            f"unknown option {command[0]!r} for computewise {verb}",
            f"see `computewise {verb} --help` (the job engine is --engine); put the command after --",
        )


def exclusive(flags: dict[str, bool]) -> None:
    """Flags that contradict each other (``--json --csv``, ``--spot --no-spot``) are refused, rather than
    letting whichever the parser reads last win without a word."""
    given = [flag for flag, on in flags.items() if on]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} contradict each other", f"give only one of {', '.join(given)}")


def choice(value: str, allowed: tuple[Choice, ...], flag: str) -> Choice:
    """The member of ``allowed`` the user named, typed as the Literal it belongs to."""
    for option in allowed:
        if option == value.lower():
            return option
    raise InputError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}", f"e.g. {flag} {allowed[0]}")


def training_tokens(text: str | None, spec: ModelSpec) -> float:
    """--tokens, or ``estimate.request.default_tokens``: 20 per parameter (Chinchilla), a CNN's recipe."""
    from computewise.estimate.request import default_tokens
    from computewise.units import parse_count

    return parse_count(text, "--tokens") if text is not None else default_tokens(spec)


def sequence_length(text: str | None, spec: ModelSpec) -> int:
    """--seq-len, or the model's context capped at 4096; models without a sequence train on samples.

    An image model's tokens are fixed by its input (a CNN has none, a ViT one per patch), so --seq-len is
    refused for it rather than taken: it used to change a ResNet's time 4x at the same FLOPs.
    """
    from computewise.estimate.request import default_seq_len
    from computewise.estimate.single import input_kind
    from computewise.units import parse_positive_int

    if text is None:
        return default_seq_len(spec)
    if input_kind(spec) == "images":
        raise InputError(
            f"{spec.name} is an image model: its input is an image, not a sequence, so --seq-len does not apply",
            "leave out --seq-len; --global-batch and --micro-batch count images",
        )
    return parse_positive_int(text, "--seq-len")


def entry_config(text: str | None) -> dict[str, Any]:
    """--config of a training entry point: a JSON object inline, or the path of a file holding one."""
    example = "e.g. --config '{\"n_layer\": 4}'"
    if text is None:
        return {}
    source = text
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise InputError(f"--config {text!r} is neither a JSON object nor a file", example)
        source = path.read_text(encoding="utf-8")
    try:
        value = json.loads(source)
    except json.JSONDecodeError as error:
        raise InputError(f"--config is not valid JSON: {error}", example) from error
    if not isinstance(value, dict):
        raise InputError("--config must be a JSON object", example)
    return value


def progress_bar(verb: str, console: Console, *extra_fields: str) -> Progress:
    """The bar of a long verb (optimize, tune, scaletest, data bench) on stderr, gone when done; ``extra_fields``:
    task fields. Done of total reads ``3/8``, and ``0/?`` while the total is not known yet (never ``0/None``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [f"{{task.fields[{name}]}}" for name in extra_fields]
    return Progress(
        TextColumn(f"[bold]{verb}[/bold] {{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        *(TextColumn(column) for column in columns),
        console=console,
        transient=True,
    )


@contextlib.contextmanager
def progress_callback(
    verb: str, console: Console, first: str = "starting"
) -> Iterator[Callable[[str, int, int], None]]:
    """``progress_bar`` as the callback the library's long calls take, ``(what, done, total)``; a total of 0 is
    not known yet (``0/?``). ``first``: what the bar says before the first call."""
    with progress_bar(verb, console) as bar:
        task_id = bar.add_task(first, total=None)
        yield lambda what, done, total: bar.update(task_id, description=what, completed=done, total=total or None)


MethodOption = Annotated[
    str,
    typer.Option(
        "--method",
        help="What trains: full (every weight), lora (adapters on a frozen 16-bit base, PEFT) or qlora (adapters "
        "on a 4-bit base, bitsandbytes).",
    ),
]
LoraRankOption = Annotated[
    int | None,
    typer.Option("--lora-rank", parser=bounded_int("--lora-rank"), help="LoRA rank r (default 16)."),
]
LoraAlphaOption = Annotated[
    float | None,
    typer.Option("--lora-alpha", parser=bounded_float("--lora-alpha"), help="LoRA alpha (default 2x the rank)."),
]
LoraTargetsOption = Annotated[
    str | None,
    typer.Option(
        "--lora-targets",
        help="Layers that get adapters: all-linear (default, QLoRA's choice), attention (q, k, v, o), or module "
        "names as PEFT's target_modules takes them (q_proj,v_proj).",
    ),
]
TrainedModulesOption = Annotated[
    str | None,
    typer.Option(
        "--trained-modules",
        help="Also train in full, beside the adapters (PEFT's modules_to_save): head, embeddings, or both "
        "(head,embeddings).",
    ),
]
AdapterPrecisionOption = Annotated[
    str | None, typer.Option("--adapter-precision", help="fp32 (PEFT's default) or bf16 adapters.")
]
QuantTypeOption = Annotated[
    str | None, typer.Option("--quant-type", help="QLoRA's 4-bit type: nf4 (default) or fp4 (bnb_4bit_quant_type).")
]
DoubleQuantOption = Annotated[
    bool | None,
    typer.Option(
        "--double-quant/--no-double-quant",
        help="QLoRA: quantize the block constants too (default on, bnb_4bit_use_double_quant).",
    ),
]


class FlagGroup:
    """Flags that belong together, declared once for every verb that takes them: a frozen dataclass whose
    fields are typed as a verb's parameters are (``Annotated[..., typer.Option(...)]``, with their defaults).

    A verb decorated with :func:`flag_groups` takes the group as one parameter, the typed value the library
    wants, instead of repeating its flags one by one in each signature."""


def flag_groups(verb: Callable[..., None]) -> Callable[..., None]:
    """``verb`` as Typer reads it: each parameter typed as a :class:`FlagGroup` is spread into the group's flags,
    in its place (so ``--help`` lists them where the verb declares the group), and gathered back into the group
    before ``verb`` is called."""
    hints = get_type_hints(verb, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[FlagGroup], tuple[str, ...]]] = {}
    for parameter in inspect.signature(verb).parameters.values():
        hint = hints[parameter.name]
        if not (isinstance(hint, type) and issubclass(hint, FlagGroup)):
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hint))
            continue
        flags = get_type_hints(hint, include_extras=True)
        members = dataclasses.fields(hint)  # type: ignore[arg-type]  # a FlagGroup is a dataclass
        groups[parameter.name] = (hint, tuple(member.name for member in members))
        parameters += [
            inspect.Parameter(
                member.name, inspect.Parameter.KEYWORD_ONLY, default=member.default, annotation=flags[member.name]
            )
            for member in members
        ]

    @functools.wraps(verb)
    def gathered(**given: Any) -> None:
        for name, (group, members) in groups.items():
            given[name] = group(**{member: given.pop(member) for member in members})
        verb(**given)

    gathered.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # what Typer reads
    gathered.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return gathered


@dataclass(frozen=True)
class FineTuneFlags(FlagGroup):
    """The fine-tuning flags of ``estimate train`` and ``plan train`` as typed, turned into ``FineTune``s.

    Every flag but ``--method`` (whose help differs between the two verbs) describes adapters, so naming one
    for full training is refused rather than silently ignored.
    """

    rank: LoraRankOption = None
    alpha: LoraAlphaOption = None
    targets: LoraTargetsOption = None
    trained_modules: TrainedModulesOption = None
    adapter_precision: AdapterPrecisionOption = None
    quant_type: QuantTypeOption = None
    double_quant: DoubleQuantOption = None

    def specs(self, methods: str) -> tuple[FineTune, ...]:
        """One ``FineTune`` per method of a comma list (``lora,qlora,full``), each once; the flags apply
        to the methods they describe."""
        names = list(dict.fromkeys(m.strip().lower() for m in methods.split(",") if m.strip()))
        if not names:
            raise InputError("--method is empty", "e.g. --method full, or --method lora,qlora,full to compare")
        adapted = [n for n in names if n != "full"]
        quantized = [n for n in names if n == "qlora"]
        return tuple(self.spec(n, adapted=bool(adapted), quantized=bool(quantized)) for n in names)

    def spec(self, method: str, *, adapted: bool = False, quantized: bool = False) -> FineTune:
        """The ``FineTune`` of ``method``. ``adapted``/``quantized``: another method of the same command uses
        the adapter/4-bit flags, so they are not refused for this one."""
        from computewise.specs import FINETUNE_METHODS, FineTune
        from computewise.specs.finetune import FOUR_BIT_TYPES

        chosen = choice(method, FINETUNE_METHODS, "--method")
        adapted = adapted or chosen != "full"
        quantized = quantized or chosen == "qlora"
        given = {
            "--lora-rank": self.rank,
            "--lora-alpha": self.alpha,
            "--lora-targets": self.targets,
            "--trained-modules": self.trained_modules,
            "--adapter-precision": self.adapter_precision,
        }
        four_bit = {"--quant-type": self.quant_type, "--double-quant": self.double_quant}
        misplaced = [flag for flag, value in given.items() if value is not None and not adapted]
        misplaced += [flag for flag, value in four_bit.items() if value is not None and not quantized]
        if misplaced:
            raise InputError(
                f"{', '.join(misplaced)} does not apply to --method {chosen}",
                f"add --method {'qlora' if '--quant-type' in misplaced or '--double-quant' in misplaced else 'lora'}, "
                f"or drop {misplaced[0]}",
            )
        if chosen == "full":
            return FineTune()
        trained = self._trained_modules()
        rank = self.rank if self.rank is not None else 16
        return FineTune(
            method=chosen,
            rank=rank,
            alpha=self.alpha if self.alpha is not None else 2.0 * rank,
            targets=tuple(t.strip() for t in (self.targets or "all-linear").split(",") if t.strip()),
            train_embeddings="embeddings" in trained,
            train_head="head" in trained,
            adapter_bytes=4
            if choice(self.adapter_precision or "fp32", ("fp32", "bf16"), "--adapter-precision") == "fp32"
            else 2,
            four_bit=choice(self.quant_type or "nf4", FOUR_BIT_TYPES, "--quant-type"),
            double_quant=True if self.double_quant is None else self.double_quant,
        )

    def _trained_modules(self) -> set[str]:
        names = {t.strip().lower() for t in (self.trained_modules or "").split(",") if t.strip()}
        unknown = names - {"head", "embeddings"}
        if unknown:
            raise InputError(
                f"--trained-modules takes head and embeddings, got {', '.join(sorted(unknown))}",
                "e.g. --trained-modules head,embeddings (new tokens need both)",
            )
        return names


# -- submit and run --engine: the job's resources, declared once for both verbs ---------------------------------


@dataclass(frozen=True)
class JobFlags(FlagGroup):
    """What a job submitted to an engine runs on (``submit``, ``run --engine``), turned into its ``JobRequest``."""

    gpus: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--gpus", ACCELERATOR_SHARE),
            help="GPUs: a count, or a fraction below 1 to share one (ray).",
        ),
    ] = 0
    accelerator: Annotated[
        str | None, typer.Option("--gpu", "-g", "--accelerator", help="Catalog accelerator, e.g. h100, a100-80gb.")
    ] = None
    cpus: Annotated[
        float | None,
        typer.Option(
            parser=bounded_float("--cpus"),
            help="CPU cores. Default: with --plan, the plan's share of its instance's vCPUs; else one per process.",
        ),
    ] = None
    nproc: Annotated[
        int,
        typer.Option(parser=bounded_int("--nproc"), help="Processes on one node under torchrun (DDP/FSDP); 1: plain."),
    ] = 1
    plan: Annotated[
        Path | None,
        typer.Option(help="Take GPUs, accelerator, processes and price from `computewise plan train ... --json`."),
    ] = None
    memory: Annotated[str | None, typer.Option(help="Memory: 32GB, 64GiB.")] = None
    checkpoint_uri: Annotated[
        str | None, typer.Option(help="Checkpoint storage that survives the node: a shared path or a bucket URL.")
    ] = None

    def request(
        self,
        name: str,
        command: Sequence[str],
        tags: Sequence[str] | None,
        max_restarts: int,
        *,
        image: str | None = None,
        spot: bool | None = None,
        hourly_usd: float | None = None,
    ) -> JobRequest:
        """``command`` as the job ``name`` on these resources, tagged, resubmitted at most ``max_restarts`` times."""
        from computewise.scale.job_request import JobRequest, JobResources

        resources = JobResources(self.gpus, self.accelerator, self.cpus, self.memory, self.nproc, spot)
        return JobRequest(
            name,
            tuple(command),
            resources,
            self.plan,
            tuple(tags or ()),
            self.checkpoint_uri,
            max_restarts,
            image,
            hourly_usd,
        )


# -- serve and deploy: the artifact and the batching and limit flags, declared once for both verbs -----------

SERVE_TOKEN_ENV = "COMPUTEWISE_SERVE_TOKEN"

ArtifactArgument = Annotated[
    str,
    typer.Argument(
        help="A directory exported by `computewise optimize MODEL --out DIR`, package.module:function returning a "
        "callable list -> list, or 'echo' (returns its inputs; measures the server itself)."
    ),
]
MaxBatchSizeOption = Annotated[
    int, typer.Option(parser=bounded_int("--max-batch-size"), help="Most inputs in one model call.")
]
MaxQueueDelayOption = Annotated[
    float,
    typer.Option(
        parser=bounded_float("--max-queue-delay-ms"), help="Longest wait to fill a batch (greedy batching only)."
    ),
]
QueueLimitOption = Annotated[
    int, typer.Option(parser=bounded_int("--queue-limit"), help="Most inputs waiting; beyond it requests get 429.")
]
TimeoutOption = Annotated[
    float,
    typer.Option(parser=bounded_float("--timeout-s"), help="Seconds a request may wait for its answer before 504."),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        envvar=SERVE_TOKEN_ENV, help="Require 'Authorization: Bearer TOKEN' on every route but /healthz and /readyz."
    ),
]
InsecureOption = Annotated[
    bool, typer.Option("--insecure", help="Allow a non-loopback --host without a token (trusted networks only).")
]
MaxBodyBytesOption = Annotated[
    int, typer.Option(parser=bounded_int("--max-body-bytes"), help="Largest request body; larger ones get 413.")
]
