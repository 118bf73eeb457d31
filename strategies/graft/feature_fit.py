"""A task's head-input features at θ_pre, read at the end of its experience (:mod:`..routing.features` has the
statistics, :mod:`..routing.class_heads` the closed-form router; this module runs the model over the experience's
rows to collect them; :class:`~.plugin.GraftPlugin` and PackNet call :func:`record_task_features_`).

The features are those of one shared space (with the rows' labels, so each class's mean is kept too), the model at
θ_pre on every owned element: the input of the first task's head module, which every head of a multi-head model
sees alike, or of a single-head model's output layer (:func:`~..routing.features.feature_layer`).

:class:`~.plugin.GraftPlugin` collects them at the end of each experience when routing will read them (never test
rows) and keeps their statistics in the owner map (saved with the skills): in the task scenario over at most
:data:`FEATURE_ROWS` training rows and as many ``valid_stream`` rows; when it routes while training (the class
scenario) over every training row (the router's sums need them) and none of the dev rows (they judge the router).
They cost one forward pass without gradients over those rows and, in the default form
(:data:`~..routing.features.DEFAULT_FORM`), a mean, a diagonal and a few leading directions of the covariance per
task; any run can then be served with any routing rule later (resume, ``task_inference_rules``) without
retraining. Heads whose tensors sit in no module of their own (prompt heads) get none, and asking for
``"features"`` then is a :class:`~cl_graft.errors.UserError`.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from avalanche.models.utils import avalanche_forward
from torch import Tensor

from cl_graft.grafting.graft import patch_, restore_

from ..eval_rows import EVAL_BATCH, collate, eval_batches, eval_view
from ..head_inputs import HeadInputs
from ..routing.class_heads import ClassHeads, sized_router
from ..routing.features import DEFAULT_FORM, FeatureAccumulator, FeatureStats, feature_layer
from ..routing.states import TaskRouter
from .owner_map import OwnerMap
from .targets import GraftTarget

FEATURE_ROWS = 512
"""At most this many examples of each dataset are passed (evenly spaced, so deterministic without a seed): a
mean and the leading covariance directions of a few hundred features are estimated from 512 examples, and
passing all of them was about a quarter of graft's extra time on the README's text stream (4,096 rows at θ_pre,
about 80 of some 300 seconds); 512 take 29."""


def spread(n: int, rows: int) -> list[int]:
    """``min(n, rows)`` evenly spaced indices of ``range(n)`` (all of them when ``n <= rows``)."""
    if n <= rows:
        return list(range(n))
    return [i * n // rows for i in range(rows)]


@torch.no_grad()
def pre_features(target: GraftTarget, owners: OwnerMap, label: int, datasets: Sequence, *, device,
                 batch: int | None = None, rows: int | None = FEATURE_ROWS) -> tuple[Tensor, Tensor] | None:
    """The head inputs ``(N, d)`` at θ_pre and the labels ``(N,)`` of at most ``rows`` evenly spaced examples of
    each of ``datasets`` (Avalanche datasets of task ``label``; ``rows=None``: every example), in the datasets'
    order, computed with every owned element at θ_pre (free elements are there already after
    :meth:`OwnerMap.add_`) and put back. None when the first task's head tensors sit in no module of their own
    (prompt heads), task ``label`` has no head while the first has one, or there are no examples. Eval mode, no
    gradients, no random numbers; the model's train/eval mode is kept."""
    first = target.label(owners.tasks[0])
    datasets = [eval_view(d) for d in datasets if len(d)]
    if not datasets or (target.heads(first) and not target.heads(label)):
        return None
    was_training = target.model.training
    target.model.eval()
    feats, labels, order, done = [], [], [], 0
    rollback = owners.rollback_patch(-1)
    stash = patch_(target.root, rollback) if rollback is not None else None
    try:
        one = collate(datasets[0], [0])[0].to(device)
        module = feature_layer(target.root, target.heads(first), lambda: avalanche_forward(target.model, one, first))
        if module is None:
            return None
        with HeadInputs(module) as rec:
            for dataset in datasets:
                idx = list(range(len(dataset))) if rows is None else spread(len(dataset), rows)
                for pos, (x, y, *_) in eval_batches(dataset, idx, batch or EVAL_BATCH):
                    avalanche_forward(target.model, x.to(device), first)
                    feats.append(rec.take(x.shape[0]).float().cpu())
                    labels.append(torch.as_tensor(y).cpu())
                    order.append(pos + done)
                done += len(idx)
    finally:
        if stash is not None:
            restore_(target.root, stash)
        target.model.train(was_training)
    if not feats:
        return None
    back = torch.cat(order).argsort()
    return torch.cat(feats)[back], torch.cat(labels)[back]


def stats_of(found: tuple[Tensor, Tensor] | None, form: str) -> FeatureStats | None:
    """The statistics in ``form`` of features and labels :func:`pre_features` gave (None for none)."""
    if found is None:
        return None
    acc = FeatureAccumulator()
    acc.update(*found)
    return acc.finish(form) if acc.count else None


def record_task_features_(target: GraftTarget, owners: OwnerMap, label: int, task: str, train, dev, *, device,
                          batch: int | None, form: str, router: tuple[str, str] | None) -> None:
    """Puts task ``task``'s (label ``label``) feature statistics into ``owners`` IN PLACE. Without ``router``: from at
    most :data:`FEATURE_ROWS` rows of ``train`` and of ``dev`` (datasets; ``dev`` may be None). With ``router``
    (its ``(router, answer)`` settings, :mod:`~..routing.class_heads`): from every row of ``train``, which also
    go into the closed-form router's sums (``owners.class_heads``, made at the first task, its candidates sized to
    the model by :func:`~..routing.class_heads.sized_router`), and the router's
    candidates are judged on the rows of ``dev`` (never fitted on) with the learned tasks' grafted models."""
    datasets = [train] if router else [d for d in (train, dev) if d is not None]
    found = pre_features(target, owners, label, datasets, device=device, batch=batch,
                         rows=None if router else FEATURE_ROWS)
    stats = stats_of(found, form)
    if stats is None:
        return
    owners.features[task] = stats
    if router is None or stats.class_means is None:
        return
    if owners.class_heads is None:
        graftable = sum(t.numel() for t in owners.pre.values())
        owners.class_heads = ClassHeads(dim=found[0].shape[1], router=sized_router(router[0], graftable),
                                        answer=router[1])
    position = owners.index(task)
    owners.class_heads.add_(found[0], position, found[1])
    held = None if dev is None else pre_features(target, owners, label, [dev], device=device, batch=batch, rows=None)
    if held is None:
        return
    states = TaskRouter(target, owners)
    try:
        owners.class_heads.judge_(held[0], position, held[1], states.lda(),
                                  lambda k, rows: states.answers(dev, k, rows, device=device))
    finally:
        states.close_()
