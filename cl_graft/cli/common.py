"""Options shared by several commands."""
from __future__ import annotations

import dataclasses
import functools
import types
import typing

import click

from ..benchmarks.tasks import data_source  # noqa: F401  (the commands' run records)
from ..errors import UserError

SEED_LIMIT = 2**32


def _check_seed(ctx, param, value: int) -> int:
    if not 0 <= value < SEED_LIMIT:
        raise UserError(f"--seed must be in [0, 2^32), got {value}")
    return value


def _refuse_idle_fresh_head(command):
    """``command`` refusing ``--fresh-head`` with a linear head (one line, before it runs): a linear head is new
    for every task whatever the flag says, so the flag would change nothing and be recorded as set."""
    @functools.wraps(command)
    def checked(*args, **options):
        if options.get("fresh_head") and options.get("head") == "linear":
            raise UserError("--fresh-head lets a prompt head (--head mlm or causal) start without pre-trained "
                            "weights; a linear head is always new: drop --fresh-head")
        return command(*args, **options)

    return checked


def common_options(f):
    """--model/--head/--fresh-head/--preset/--data-dir/--seed/--device/--out/--overwrite, in that order in --help;
    ``--fresh-head`` with ``--head linear`` is refused before the command runs."""
    f = _refuse_idle_fresh_head(f)
    opts = [
        click.option("--model", default="minilm", show_default=True,
                     help="Hub id or local path of the pre-trained model; 'minilm' = the bundled all-MiniLM-L6-v2."),
        click.option("--head", type=click.Choice(["linear", "mlm", "causal"]), default="linear", show_default=True,
                     help="linear head on pooled states, or prompt-based label words (masked / causal LM)."),
        click.option("--fresh-head", is_flag=True,
                     help="Allow a prompt head the model has no pre-trained weights for (randomly initialised)."),
        click.option("--preset", default="quick", show_default=True, help="Run size: smoke, quick or paper."),
        click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                     help="Folder of <task>/{train,test}.jsonl (default: $CL_GRAFT_DATA, else the HF Hub)."),
        click.option("--seed", type=int, default=0, show_default=True, callback=_check_seed,
                     help="Seed for sampling and training, in [0, 2^32)."),
        click.option("--device", default="auto", show_default=True,
                     help="Where models run: auto (a CUDA GPU if torch sees one, else the CPU), cpu, cuda, cuda:N."),
        click.option("--out", type=click.Path(file_okay=False), required=True, help="Output folder."),
        click.option("--overwrite", is_flag=True, help="Replace results already in --out."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def console_options(f):
    """``--quiet`` and ``--verbose`` (passed on as ``quiet`` and ``verbose``): what
    :meth:`cl_graft.console.Console.from_flags` makes the command's console print."""
    f = click.option("--verbose", is_flag=True,
                     help="Also the libraries' own logs: Avalanche's InteractiveLogger and every inner progress "
                          "bar.")(f)
    return click.option("--quiet", is_flag=True,
                        help="Print nothing but errors and warnings (no progress line, no result lines).")(f)


def field_option(fld: dataclasses.Field, kind, *, name: str | None = None, help: str | None = None,
                 default=dataclasses.MISSING, shown: str | None = None):
    """A click option for a dataclass field: ``--<name>`` (default: the field's name, dashed), the field's type
    (``X | None`` as ``X``), its ``metadata["help"]`` (or ``help``) and its default; with ``default``, that
    default instead and ``shown`` (if any) as the default in ``--help``."""
    if isinstance(kind, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    text = fld.metadata.get("help", "") if help is None else help
    if default is dataclasses.MISSING:
        return click.option(f"--{(name or fld.name).replace('_', '-')}", type=kind, default=fld.default,
                            show_default=True, help=text)
    return click.option(f"--{(name or fld.name).replace('_', '-')}", type=kind, default=default,
                        help=text + (f"  [default: {shown}]" if shown else ""))


def data_identity(tasks: list[str], data_dir: str | None) -> dict[str, str]:
    """Task → sha256 of its data files (what a run's numbers depend on, wherever the folder is)."""
    from ..benchmarks import data_sha256

    return {t: data_sha256(t, data_dir) for t in tasks}


def check_finetune_folder(path: str, *, match: tuple[str, int] | None = None) -> None:
    """Refuses a ``--finetuned`` folder that a cl-graft command claimed but never finished (no run record), and,
    with ``match = (preset, seed)``, one fine-tuned with another preset or seed. The folder is a ``finetune``
    output or the ``finetuned/`` folder of a localize/surgical/analyze run; a model saved from Python
    (``save_classifier``, no run record) has nothing to check."""
    from pathlib import Path

    from ..artifacts import RUN_CONFIG
    from ..files import read_json
    from ..outdir import OWNER_FILE
    from ..schema import Obj, read_checked

    folder = Path(path)
    for run in [folder] + ([folder.parent] if folder.name == "finetuned" else []):
        if not (run / OWNER_FILE).is_file():
            continue
        owner = read_json(run / OWNER_FILE)
        command = owner.get("command") if isinstance(owner, dict) else None
        if not (run / RUN_CONFIG).is_file():
            raise UserError(f"--finetuned {path}: an unfinished run of cl-graft {command} (no {RUN_CONFIG}); "
                            f"finish it or choose another folder")
        record = read_checked(run / RUN_CONFIG, Obj({"preset": str, "seed": int}))
        if match is not None and (record["preset"], record["seed"]) != tuple(match):
            raise UserError(f"--finetuned {path} was fine-tuned with preset {record['preset']} and seed "
                            f"{record['seed']}, not preset {match[0]} and seed {match[1]} as asked; they must match")
        return


def load_finetuned(path: str | None, task: str, device, *, match: tuple[str, int] | None = None):
    """The saved fine-tune (checked finished, to hold ``task`` and, with ``match``, to have that preset and seed:
    :func:`check_finetune_folder`) and its training seconds from metrics.json, or Nones."""
    from pathlib import Path

    from ..artifacts import load_classifier
    from ..schema import Nullable, Obj, read_checked

    if path is None:
        return None, None
    check_finetune_folder(path, match=match)
    ft = load_classifier(path, device=device)
    if task not in ft.tasks:
        raise UserError(f"--finetuned {path} has tasks {sorted(ft.tasks)}, not {task!r}")
    metrics = Path(path) / "metrics.json"
    seconds = Obj({}, {"train_seconds": Nullable(float)})
    return ft, (read_checked(metrics, seconds).get("train_seconds") if metrics.exists() else None)


def pre_and_finetuned(finetuned: str | None, spec, *, model: str, head: str, fresh_head: bool, max_length: int,
                      device, seed: int, match: tuple[str, int] | None = None):
    """θ_pre with the task's head at its fine-tuning init (seeded), the saved fine-tune of ``--finetuned`` (or
    None: the command fine-tunes; ``match``: see :func:`load_finetuned`) and that fine-tune's training seconds.
    θ_pre comes from the fine-tune's own source model, head kind and pooling when one is given."""
    import torch

    from ..training.models import build_classifier

    ft, seconds = load_finetuned(finetuned, spec.name, device, match=match)
    torch.manual_seed(seed)
    pre = build_classifier(ft.source if ft else model, head=ft.head_kind if ft else head,
                           pooling=ft.pooling if ft else "mean", max_length=max_length, device=device,
                           fresh_head=fresh_head)
    pre.add_task(spec, seed=seed)
    return pre, ft, seconds
