"""Builders of Avalanche's baselines: ``build(ctx) -> template`` from a
:class:`~..interface.entry.BuildContext`, each with the model of the stream's scenario (``ctx.template``'s:
:func:`~..interface.scenario.scenario_model`) and its settings (:mod:`.settings`). Avalanche is imported only
here, when a strategy is built.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, row_bytes
from ..interface.scenario import is_multi_head
from .kept import plugin_of
from .scenario import check_new_classes

Builder = Callable[[BuildContext], Any]


def stock(cls_name: str, fixed: Mapping[str, Any] | None = None,
          **arguments: str) -> Builder:
    """A builder of ``avalanche.training.<cls_name>`` with the keyword
    arguments ``fixed`` and, from its settings, ``arguments`` (argument → settings field)."""
    def build(ctx: BuildContext):
        import avalanche.training

        kwargs = {**(fixed or {}), **{arg: getattr(ctx.settings, field) for arg, field in arguments.items()}}
        return getattr(avalanche.training, cls_name)(**ctx.template, plugins=ctx.plugins, **kwargs)

    return build


def tensor_rows(name: str, why: str) -> Callable[[Any, Any], None]:
    """An entry's ``check`` for a method whose rows must be tensors (digits): on a text stream (rows are dicts
    of token ids of different lengths) a one-line refusal saying ``why``, before any strategy trains."""
    def check(settings, stream) -> None:
        if stream.splits:
            raise UserError(f"{name} {why}: it runs on digits streams, not on text streams")

    return check


def replay_matched(peer: str) -> Builder:
    """A builder of Replay whose memory holds as many bytes as strategy ``peer`` kept in the same run (its result
    in ``ctx.peers``), in rows of the stream's average size (:func:`~..interface.entry.row_bytes`)."""
    def build(ctx: BuildContext):
        from avalanche.training import Replay

        rows = [row for exp in ctx.stream.benchmark.train_stream for row in exp.dataset]
        per_row = sum(row_bytes(r) for r in rows) / max(1, len(rows))
        memory = max(1, int(ctx.peers[peer].bytes / per_row))
        return Replay(**ctx.template, plugins=ctx.plugins, mem_size=memory)

    return build


def single(ctx: BuildContext):
    """A fresh model per task (the runner's ``separate`` fit), trained by Naive: it answers a task's rows with
    that task's model, so it needs the task label at test."""
    from avalanche.training import Naive

    return Naive(**ctx.template, plugins=ctx.plugins)


def si(ctx: BuildContext):
    """SI as Naive with the copied-snapshot SI plugin (:mod:`cl_graft.strategies.plugins.synaptic_intelligence`:
    Avalanche's ``SynapticIntelligence`` learns no importance on CPU, so it trains exactly as Naive)."""
    from avalanche.training import Naive

    from ..plugins.synaptic_intelligence import CopiedSynapticIntelligence

    plugin = CopiedSynapticIntelligence(si_lambda=ctx.settings.si_lambda, eps=ctx.settings.si_eps)
    return Naive(**ctx.template, plugins=[*ctx.plugins, plugin])


def gem(ctx: BuildContext):
    """GEM (needs the ``quadprog`` solver: ``pip install -e ".[baselines]"``)."""
    try:
        import quadprog  # noqa: F401
    except ImportError:
        raise UserError('gem needs the quadprog solver: pip install -e ".[baselines]"') from None
    return stock("GEM", patterns_per_exp="gem_patterns", memory_strength="gem_strength")(ctx)


def agem(ctx: BuildContext):
    """A-GEM; its reference sample has at least one row of every experience (Avalanche divides the sample by the
    number of experiences kept and fails on 0)."""
    from avalanche.training import AGEM

    from .seeding import PythonSeed

    sample = max(ctx.settings.agem_sample, len(ctx.stream.tasks))
    return AGEM(**ctx.template, plugins=[*ctx.plugins, PythonSeed()],
                patterns_per_exp=ctx.settings.gem_patterns, sample_size=sample)


def _single_head(ctx: BuildContext, name: str) -> torch.nn.Module:
    """The single-head model a class-incremental method trains (refusing what it cannot serve)."""
    check_new_classes(name, ctx.stream)
    if is_multi_head(ctx.model):
        raise UserError(f"{name} needs a single-head model (--model mlp)")
    return ctx.model


def icarl(ctx: BuildContext):
    """iCaRL on an ``nn.Sequential`` model: its layers before the last are the feature extractor, the last (a
    linear layer) the training classifier; at test Avalanche's nearest-mean-of-exemplars classifier."""
    from avalanche.training import ICaRL

    model = _single_head(ctx, "icarl")
    if not isinstance(model, torch.nn.Sequential) or not isinstance(model[-1], torch.nn.Linear):
        raise UserError("icarl needs an nn.Sequential model ending in a linear layer (--model mlp)")
    kwargs = {k: v for k, v in ctx.template.items() if k not in ("model", "criterion")}   # its own loss
    strategy = ICaRL(**kwargs, feature_extractor=model[:-1], classifier=model[-1], plugins=list(ctx.plugins),
                     memory_size=ctx.settings.replay_mem, buffer_transform=None,
                     fixed_memory=ctx.settings.icarl_fixed_memory)
    # its exemplars and class means are made after each experience before any other plugin (the recipe's
    # FiniteGuard) evaluates the model: at test the model answers by those means alone
    herding = plugin_of(strategy, "_ICaRLPlugin")
    strategy.plugins.remove(herding)
    strategy.plugins.insert(0, herding)
    return strategy


def bic(ctx: BuildContext):
    """BiC as Avalanche's ``BiC`` strategy builds it (a ``SupervisedTemplate`` with its plugin last), with its
    bias-correction stage runnable on this torch (:mod:`.bic_plugin`); Avalanche's bias-layer optimizer (SGD,
    lr 0.1), temperature 2 and distillation weight (the old classes' share)."""
    from avalanche.training.templates import SupervisedTemplate

    from .bic_plugin import BiasCorrection

    _single_head(ctx, "bic")
    plugin = BiasCorrection(mem_size=ctx.settings.replay_mem, val_percentage=ctx.settings.bic_val_share,
                            stage_2_epochs=ctx.settings.bic_stage2_epochs)
    return SupervisedTemplate(**ctx.template, plugins=[*ctx.plugins, plugin])
