"""Multi-task fine-tuning on tiny models (cl_graft.training.multitask) and region-restricted steps."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.regions.region import Region, graftable_names
from cl_graft.training.finetune import FinetuneConfig
from cl_graft.training.multitask import finetune_multitask_, task_schedule

from helpers import PAIR, SENTIMENT, tiny_bert, tiny_gpt2, tiny_roberta_mlm, toy_tasks


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


@pytest.mark.parametrize("build", [tiny_roberta_mlm, tiny_gpt2], ids=["roberta-mlm", "gpt2-causal"])
def test_prompt_heads_share_the_frozen_lm_head(build):
    model = build()
    model.add_task(SENTIMENT)
    model.add_task(PAIR)
    before = _snapshot(model)
    cfg = FinetuneConfig(lr=0.1, batch_size=4, steps=6, eval_every=3, seed=0)
    result = finetune_multitask_(model, toy_tasks(), toy_tasks(), cfg, progress=False)
    after = _snapshot(model)
    assert set(result.dev) == {"toy", "toypair"}
    assert all(torch.equal(before[n], after[n]) for n in model.head_parameter_names())
    assert any(not torch.equal(before[n], after[n]) for n in graftable_names(model.named_parameters()))


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
