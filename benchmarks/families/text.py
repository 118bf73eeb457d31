"""What the text families share: the classifier every strategy starts from and the stream made of task rows."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cl_graft.errors import UserError
from cl_graft.task import TaskRows, TaskSpec

from . import StreamRequest, StreamSetup


def refuse_digits_model(request: StreamRequest) -> None:
    """Refuses a digits model (``--model mlp``) for a text stream at once, before any data or model is looked up
    (the name would otherwise go to the Hub as a model id); a local folder of that name is a model like any other.

    Raises:
        UserError: ``request.model`` names a digits model (one line).
    """
    from ..digits import MODELS

    if request.model in MODELS and not Path(request.model).exists():
        raise UserError(f"--model {request.model} is a digits model (split-digits, permuted-digits:N); --stream "
                        f"{request.spec} is a text stream: give a pre-trained text model (minilm, a Hub id or a "
                        f"local folder)")


def text_setup(request: StreamRequest, splits: Sequence[TaskRows], *, data_tasks: list[str],
               head: TaskSpec | None = None, record: dict | None = None) -> StreamSetup:
    """A text stream's setup: the seeded classifier (a head per experience, or the one ``head`` over every class
    in the class scenario), the record's fields (``record`` added or replacing) and the maker of the stream and
    the tuning stream (:func:`~cl_graft.benchmarks.data.split_dev`).

    Args:
        request: the spec and options.
        splits: each experience's rows, in stream order.
        data_tasks: the data folders the rows come from (their sha256 is the data's identity).
        head: the class scenario's one head (its spec holds every label the rows' ids index).
        record: more fields for the run record.
    """
    import torch

    from cl_graft.training.models import build_classifier

    from ..data import data_sha256, split_dev
    from ..streams import Stream
    from ..tasks import data_source

    data = request.data
    tune_splits = split_dev(splits) if request.tune else None
    fields = {"stream": [s.spec.name for s in splits],
              "tasks": [s.spec.name for s in splits], "model": request.model, "head": request.head,
              "fresh_head": request.fresh_head, "scenario": request.scenario, "k": data.k, "dev_k": data.dev_k,
              "eval_cap": data.eval_cap, "max_length": data.max_length,
              "data_sha256": {t: data_sha256(t, request.data_dir) for t in data_tasks}, **(record or {})}
    torch.manual_seed(request.seed)
    clf = build_classifier(request.model, head=request.head, max_length=data.max_length, device=request.device,
                           fresh_head=request.fresh_head)
    for i, spec in enumerate([head] if head is not None else [s.spec for s in splits]):
        clf.add_task(spec, seed=request.seed + i)
    shared = {"name": request.spec, "scenario": request.scenario, "head": head.name if head is not None else None}

    def make():
        return (Stream.make(splits, clf, **shared),
                Stream.make(tune_splits, clf, **shared) if tune_splits is not None else None)

    return StreamSetup(record=fields, base=clf, make=make, source=data_source(request.data_dir))
