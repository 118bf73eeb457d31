"""Multi-task fine-tuning on tiny models, region-restricted steps, and the skill-map run end to end."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.finetune import FinetuneConfig
from cl_graft.multitask import finetune_multitask_, task_schedule
from cl_graft.region import Region, graftable_names
from conftest import PAIR, SENTIMENT, tiny_bert

GOOD = ["it was great fun", "a good movie", "the film is wonderful", "great fun and good"]
BAD = ["it was terrible", "a dull and boring plot", "bad and boring", "terrible plot"]


def toy_tasks() -> dict[str, list[dict]]:
    """A sentiment task and a pair task (label 0 when both sides agree in sentiment) on the tiny vocabulary."""
    single = [{"text": t, "label": 1} for t in GOOD] + [{"text": t, "label": 0} for t in BAD]
    pair = [{"text_a": a, "text_b": b, "label": 0} for a, b in zip(GOOD, GOOD[1:] + GOOD[:1])]
    pair += [{"text_a": a, "text_b": b, "label": 1} for a, b in zip(GOOD, BAD)]
    return {"toy": single, "toypair": pair}


def _model():
    m = tiny_bert()
    m.add_task(SENTIMENT, seed=0)
    m.add_task(PAIR, seed=1)
    return m


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_task_schedule_is_seeded_and_uses_every_task():
    a, b = task_schedule(["x", "y", "z"], 300, seed=4), task_schedule(["x", "y", "z"], 300, seed=4)
    assert a == b and a != task_schedule(["x", "y", "z"], 300, seed=5)
    assert all(70 < c < 130 for c in Counter(a).values())
    with pytest.raises(UserError):
        task_schedule([], 3, seed=0)


def test_multitask_learns_both_tasks_and_is_seeded():
    data = toy_tasks()
    cfg = FinetuneConfig(lr=0.2, batch_size=4, steps=80, eval_every=20, seed=2)
    runs = []
    for _ in range(2):
        model = _model()
        before = _snapshot(model)
        result = finetune_multitask_(model, data, data, cfg, progress=False)
        runs.append(_snapshot(model))
    assert set(result.steps_per_task) == {"toy", "toypair"} and sum(result.steps_per_task.values()) == 80
    assert result.best_dev == pytest.approx(sum(result.dev.values()) / 2) and result.dev["toy"] >= 0.75
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])          # same seed, same bits
    for n in model.embedding_parameter_names():
        assert torch.equal(before[n], runs[0][n])
    assert not torch.equal(before["heads.toy.weight"], runs[0]["heads.toy.weight"])
    assert not torch.equal(before["heads.toypair.weight"], runs[0]["heads.toypair.weight"])


def test_region_steps_move_only_the_region():
    model = _model()
    names = graftable_names(model.named_parameters())
    params = dict(model.named_parameters())
    region = Region(ops.random_mask({n: params[n].shape for n in names}, 50, seed=0))
    before = _snapshot(model)
    cfg = FinetuneConfig(lr=0.5, batch_size=4, steps=10, eval_every=10, weight_decay=0.1, seed=0)
    finetune_multitask_(model, toy_tasks(), {}, cfg, region=region, progress=False)
    after = _snapshot(model)
    moved = 0
    for n in after:
        if n in region.masks:
            m = region.masks[n]
            assert torch.equal(after[n][~m], before[n][~m]), n               # outside: bit-exact
            moved += int((after[n][m] != before[n][m]).sum())
        else:
            assert torch.equal(after[n], before[n]), n                        # heads, embeddings untouched
    assert moved > 25


def test_bad_inputs():
    model = _model()
    cfg = FinetuneConfig(steps=2, eval_every=2)
    with pytest.raises(UserError, match="no task 'nope'"):
        finetune_multitask_(model, {"nope": toy_tasks()["toy"]}, {}, cfg, progress=False)
    with pytest.raises(UserError, match="no training rows"):
        finetune_multitask_(model, {"toy": []}, {}, cfg, progress=False)
    params = dict(model.named_parameters())
    empty = Region.empty({n: params[n].shape for n in graftable_names(params.items())})
    with pytest.raises(UserError, match="nothing to train"):
        finetune_multitask_(model, toy_tasks(), {}, cfg, region=empty, progress=False)
