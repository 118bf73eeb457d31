"""What several baselines share: builder pieces, the refusals of streams a method cannot serve, the replay
family's settings and how the bytes a baseline keeps are counted. It declares no entry.

Bytes: every baseline's ``kept_bytes(strategy, model) -> (bytes, info)`` is ``bytes`` = the trained model
(:func:`~..interface.entry.model_bytes`; a multi-head copy counts its trunk and every head) + the method's
state; ``info["kept"]`` = that state by part (bytes), ``info["model_bytes"]`` the model's
(:func:`with_model`). Memory rows count their inputs (:func:`~..interface.entry.row_bytes`: a digit's 64
float32 pixels, a text row's int32 token ids), as ``replay-matched`` sizes its memory; labels (one integer per
row) are not counted, for any strategy. Tensors a method recomputes at every step but keeps as attributes
(GEM's gradients of each experience's memory, A-GEM's reference gradient) are counted: they are held while it
trains.

Scenarios: the model of each scenario is the harness's (:func:`~..interface.scenario.scenario_model`: in the
task-incremental one a single-head model runs as its multi-head copy, for every strategy alike); a method
built for one scenario declares it in its entry's ``scenarios``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cl_graft.errors import UserError
from cl_graft.presets import Preset

from ..interface.entry import BuildContext, model_bytes, moved_names, row_bytes
from ..interface.settings import Settings

MODEL = "the trained weights"
"""The start of every ``stores`` text: each baseline keeps its trained model."""
CLASS = ("class",)
"""The ``scenarios`` of a class-incremental method."""
GEM_PATTERNS_HELP = "GEM / A-GEM: rows kept per experience."

Builder = Callable[[BuildContext], Any]


def positive(name: str, value: float) -> None:
    """Refuses a setting ``name`` that is not > 0 (one line)."""
    if not value > 0:
        raise UserError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class ReplayFamily(Settings):
    """A memory of ``replay_mem`` rows, sized by the preset: ``replay`` tunes it (unless ``replay_per_class`` fixes
    it, :class:`PerClassMemory`); ``er-ace``, ``der``, ``icarl`` and ``bic`` keep it (the budget the user sets,
    their bytes recorded) and tune their own knob at that memory."""

    replay_mem: int = field(default=256, metadata={"help": "Replay memory size in rows.", "preset": True})

    def __post_init__(self) -> None:
        if self.replay_mem < 1:
            raise UserError(f"replay_mem must be >= 1, got {self.replay_mem}")

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int):
        return cls(replay_mem=preset.continual.replay_mem)


@dataclass(frozen=True)
class PerClassMemory(ReplayFamily):
    """``replay``'s and ``der``'s memory: ``replay_mem`` rows, or with ``replay_per_class`` = k, k rows of every
    class seen (a class-balanced memory with a fixed share per class, k × the stream's classes at the end; one
    option sets both)."""

    replay_per_class: int = field(default=0, metadata={
        "help": "Replay, DER: rows kept of every class seen (a class-balanced memory growing with the classes; "
                "replay's memory then is not tuned); 0: replay_mem rows."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replay_per_class < 0:
            raise UserError(f"replay_per_class must be >= 0, got {self.replay_per_class}")


def stream_classes(stream) -> int:
    """How many classes the stream's training experiences bring."""
    return len({int(c) for exp in stream.benchmark.train_stream for c in exp.classes_in_this_experience})


def per_class_buffer(settings: PerClassMemory, stream) -> dict[str, Any]:
    """The arguments of Avalanche's ``ClassBalancedBuffer`` for ``settings``: ``replay_per_class`` rows of each of
    the stream's classes (a fixed share), or, with none, ``replay_mem`` rows shared by the classes seen."""
    if not settings.replay_per_class:
        return {"max_size": settings.replay_mem, "adaptive_size": True}
    classes = stream_classes(stream)
    return {"max_size": settings.replay_per_class * classes, "adaptive_size": False, "total_num_classes": classes}


def per_class_check(name: str) -> Check:
    """An entry's ``check`` for a :class:`PerClassMemory` strategy: with ``replay_per_class``, a one-line refusal of
    a stream whose experiences share class ids (a task-list stream's labels, ``permuted-digits``: one class's rows
    would stand for several)."""
    def check(settings, stream) -> None:
        if settings.replay_per_class:
            new_classes(f"{name} with --replay-per-class")(settings, stream)

    return check


def stock(cls_name: str, fixed: Mapping[str, Any] | None = None, **arguments: str) -> Builder:
    """A builder of ``avalanche.training.<cls_name>`` with the keyword arguments ``fixed`` and, from its
    settings, ``arguments`` (argument → settings field)."""
    def build(ctx: BuildContext):
        import avalanche.training

        kwargs = {**(fixed or {}), **{arg: getattr(ctx.settings, field) for arg, field in arguments.items()}}
        return getattr(avalanche.training, cls_name)(**ctx.template, plugins=ctx.plugins, **kwargs)

    return build


Check = Callable[[Any, Any], None]
"""An entry's ``check(settings, stream)`` (:attr:`~..interface.entry.StrategyEntry.check`)."""


def tensor_rows(name: str, why: str) -> Check:
    """An entry's ``check`` for a method whose rows must be tensors (digits): on a text stream (rows are dicts
    of token ids of different lengths) a one-line refusal saying ``why``, before any strategy trains."""
    def check(settings, stream) -> None:
        if stream.splits:
            raise UserError(f"{name} {why}: it runs on digits streams, not on text streams")

    return check


def text_rows(name: str) -> Check:
    """An entry's ``check`` for a method that works on a pre-trained text encoder: on a stream without text rows
    (digits) a one-line refusal, before any strategy trains."""
    def check(settings, stream) -> None:
        if not stream.splits:
            raise UserError(f"{name} works on a pre-trained text encoder: it runs on text streams, not on "
                            f"{stream.name}")

    return check


def new_classes(name: str) -> Check:
    """An entry's ``check`` for a class-incremental method that keeps exemplars per class on a single-head model
    (iCaRL, BiC): a one-line refusal of a stream whose experiences share classes (``permuted-digits``: their
    exemplar sets and old/new split of the output layer count on each experience bringing classes not seen
    before), before any strategy trains."""
    def check(settings, stream) -> None:
        seen: set[int] = set()
        for exp in stream.benchmark.train_stream:
            classes = {int(c) for c in exp.classes_in_this_experience}
            if classes & seen:
                raise UserError(f"{name} needs new classes in every experience (split-digits); {stream.name} "
                                f"repeats classes")
            seen |= classes

    return check


def all_checks(*checks: Check) -> Check:
    """One entry ``check`` running ``checks`` in order (the first refusal is the one given)."""
    def check(settings, stream) -> None:
        for each in checks:
            each(settings, stream)

    return check


def frozen_encoder(ctx: BuildContext):
    """The run's text classifier with every tensor but its heads' frozen (``requires_grad`` off; the copy the
    run gave this strategy, :attr:`BuildContext.model`); its entry's :func:`text_rows` check refused other streams
    before any strategy trained."""
    clf = ctx.model.clf
    heads = set(clf.head_parameter_names())
    for n, p in clf.named_parameters():
        p.requires_grad_(n in heads)
    return clf


def features_pass(strategy) -> str:
    """The progress line's label (an entry's ``phase_after_training``) of a head that takes no optimizer step and
    reads its experience's rows once after it."""
    return "θ_pre features"


def head_bytes(strategy, model) -> tuple[int, dict]:
    """Bytes of the classifier's heads (what ``linear-probe`` and ``ncm`` keep beyond the encoder)."""
    clf = model.clf
    names = set(clf.head_parameter_names())
    size = sum(p.numel() * p.element_size() for n, p in clf.named_parameters() if n in names)
    return size, {"kept": {"heads": size}}


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj``: a tensor, a module (parameters and buffers), Avalanche's ``ParamData``
    (its ``data``), or dicts, lists and tuples of those (nested)."""
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, torch.nn.Module):
        return sum(tensor_bytes(t) for t in (*obj.parameters(), *obj.buffers()))
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    data = getattr(obj, "data", None)
    return tensor_bytes(data) if isinstance(data, torch.Tensor) else 0


def moved_bytes(per_name: Mapping[str, Any], model: torch.nn.Module) -> int:
    """Bytes of a per-parameter state (name → tensor or ``ParamData``, keyed as ``model`` names its parameters)
    over the tensors fine-tuning moves (:func:`~..interface.entry.moved_names`). Avalanche keeps an entry for every
    parameter; a frozen one's (all-MiniLM-L6-v2's embeddings: their old values and an all-zero Fisher) is a constant
    the method need not store, as the trained model's bytes leave it out."""
    names = moved_names(model)
    return sum(tensor_bytes(v) for n, v in per_name.items() if n in names)


def rows_bytes(dataset: Iterable | None) -> int:
    """Bytes of a memory's rows (their inputs, :func:`~..interface.entry.row_bytes`)."""
    return 0 if dataset is None else sum(row_bytes(dataset[i]) for i in range(len(dataset)))


def plugin_of(strategy, kind: str):
    """The strategy's plugin whose class is named ``kind`` (Avalanche's, e.g. ``EWCPlugin``)."""
    return next(p for p in strategy.plugins if type(p).__name__ == kind)


def copy_bytes(model: torch.nn.Module | None) -> int:
    """Bytes a kept copy of the model (a distillation teacher) adds to θ_pre: the tensors fine-tuning moves, as the
    trained model's own bytes count them (:func:`model_bytes`); 0 before there is a copy."""
    return 0 if model is None else model_bytes(getattr(model, "module", model))


def with_model(kept: Callable[[Any], dict[str, int]], rows: Callable[[Any], int] | None = None
               ) -> Callable[[Any, torch.nn.Module], tuple[int, dict]]:
    """An entry's ``kept_bytes``: the trained model's bytes plus ``kept(strategy)`` (part → bytes); with
    ``rows`` (a replay memory), ``info["memory_rows"]`` and ``info["memory_bytes"]`` too."""
    def storage(strategy, model: torch.nn.Module) -> tuple[int, dict]:
        trained = getattr(strategy.model, "module", strategy.model)    # unwrapped from DDP
        parts = kept(strategy)
        size = model_bytes(trained)
        info = {"model_bytes": size, "kept": parts}
        if rows is not None:
            info.update(memory_rows=rows(strategy), memory_bytes=parts["memory"])
        return size + sum(parts.values()), info

    storage.__doc__ = kept.__doc__
    return storage


@with_model
def model_only(strategy) -> dict[str, int]:
    """The trained model alone (naive, joint; single counts it once per task)."""
    return {}


def buffer(strategy):
    """The replay buffer of a strategy with a storage policy (Replay's plugin, ER-ACE's and DER's own)."""
    owner = strategy if hasattr(strategy, "storage_policy") else \
        next(p for p in strategy.plugins if hasattr(p, "storage_policy"))
    return owner.storage_policy.buffer


def memory_rows(strategy) -> int:
    """Rows in the memory of a strategy with a storage policy."""
    return len(buffer(strategy))


def _memory(strategy) -> dict[str, int]:
    """Replay, ER-ACE: the memory's rows."""
    return {"memory": rows_bytes(buffer(strategy))}


replay_kept = with_model(_memory, memory_rows)
"""The ``kept_bytes`` of a strategy whose state is a memory of rows (``replay``, ``replay-matched``,
``er-ace``)."""
