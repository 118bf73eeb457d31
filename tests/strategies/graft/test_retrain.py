"""Retraining inside a smaller region in the last steps of an experience (cl_graft.strategies.graft.sizing.retrain):
when it switches, that only the retrained region and the head move afterwards, the choice between the retrained region
and the vouched graft, and the search after training when the switch never comes."""
from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

avalanche = pytest.importorskip("avalanche")

from avalanche.benchmarks import nc_benchmark
from avalanche.core import SupervisedPlugin
from avalanche.models import MTSimpleMLP
from cl_graft.strategies import GraftStrategy, RegionSize
from cl_graft.strategies.graft.sizing.retrain import planned_steps
from cl_graft.strategies.graft.sizing import sizing_records

DIM, CLASSES = 16, 4


def _blobs(n: int, seed: int) -> TensorDataset:
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    ds = TensorDataset(centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed)), y)
    ds.targets = y.tolist()
    return ds


@pytest.fixture(scope="module")
def bm():
    return nc_benchmark(_blobs(160, 1), _blobs(64, 2), n_experiences=2, task_labels=True, seed=0,
                        fixed_class_order=[0, 1, 2, 3])


class Moves(SupervisedPlugin):
    """Per experience: the steps taken, and which graftable elements (and head values) moved after each step."""

    def __init__(self):
        super().__init__()
        self.steps, self.moved, self.heads = {}, {}, {}

    def before_training_exp(self, strategy, **kw):
        self.last = {n: p.detach().clone() for n, p in strategy.model.named_parameters()}

    def after_training_iteration(self, strategy, **kw):
        e = strategy.experience.current_experience
        self.steps[e] = self.steps.get(e, 0) + 1
        now = {n: p.detach().clone() for n, p in strategy.model.named_parameters()}
        self.moved.setdefault(e, []).append({n: now[n] != self.last[n] for n in now})
        self.heads.setdefault(e, []).append({n: v for n, v in now.items() if "classifiers" in n})
        self.last = now


class StopAt(SupervisedPlugin):
    """Stops each experience after ``steps`` steps without saying so beforehand (as early stopping does)."""

    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def before_training_exp(self, strategy, **kw):
        self.done = 0

    def after_training_iteration(self, strategy, **kw):
        self.done += 1
        if self.done >= self.steps:
            strategy.stop_training()


class Limit(SupervisedPlugin):
    """A plugin that announces its step limit (as cl-graft's StepLimit does)."""

    step_limit = 10


RETRAIN = RegionSize(retrain=0.25)


def _train(bm, *plugins, region_size=RETRAIN, seed=0):
    torch.manual_seed(seed)
    model = MTSimpleMLP(input_size=DIM, hidden_size=32)
    strategy = GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=16,
                             train_epochs=3, eval_mb_size=64, plugins=list(plugins),
                             region_size=region_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for exp in bm.train_stream:
            torch.manual_seed(100 + exp.current_experience)
            strategy.train(exp)
    return strategy


def test_the_last_quarter_of_steps_trains_only_the_retrained_region_and_the_head(bm):
    moves = Moves()
    strategy = _train(bm, moves)
    owners = strategy.graft.owners
    for e, record in enumerate(sizing_records(owners)):
        steps = moves.steps[e]                                  # 72 training rows (8 held out) → 5 batches × 3
        assert steps == 15
        r = record["retrain"]
        assert r["at_step"] == steps - math.ceil(0.25 * steps) == 11 and r["steps"] == 4 and r["kept"]
        assert record["share"] <= r["rung_share"] and record["below_cap"]
        after = moves.moved[e][r["at_step"]:]                   # the steps after the switch
        region = owners.patches[e].region.masks
        for n in owners.names:
            moved = torch.stack([m[n] for m in after]).any(0)
            assert not moved.any() or (r["kept"] and bool((moved <= region[n]).all()))
        heads = [n for n in moves.heads[e][0] if f"classifiers.{e}." in n]
        assert heads and any(bool(moves.moved[e][-1][n].any()) for n in heads)    # the head still trains


def test_a_retrained_region_that_scores_lower_gives_way_to_the_vouched_graft(bm):
    """One element cannot hold a task: the retrained region (the smallest rung, 1 element) scores below the
    vouched graft on the held-out rows, so the task keeps that graft at its rung, with the head it had at the
    switch."""
    moves = Moves()
    size = RegionSize(ladder=(1e-4, 0.2), shrink=5, retrain=0.25)
    strategy = _train(bm, moves, region_size=size)
    record = sizing_records(strategy.graft.owners)[0]
    r = record["retrain"]
    assert not r["kept"] and r["score"] < r["fallback_score"] == record["score"]
    assert record["share"] == r["rung_share"] and record["elements"] > 1
    switch, last = moves.heads[0][r["at_step"] - 1], strategy.graft.owners.patches[0]
    for n, value in switch.items():
        if "classifiers.0." in n:                              # the head as it was after the switch step
            assert torch.equal(last.extra[n], value)


def test_no_retraining_when_training_stops_before_the_switch_or_it_is_off(bm):
    for plugins, size in (((StopAt(5),), RETRAIN), ((), RegionSize())):
        strategy = _train(bm, *plugins, region_size=size)
        for record in sizing_records(strategy.graft.owners):
            assert "retrain" not in record and "refined_gain" in record      # the search after training


def test_planned_steps_read_a_plugins_step_limit(bm):
    strategy = _train(bm, Limit())
    assert [r["retrain"]["at_step"] for r in sizing_records(strategy.graft.owners)] == [7, 7]

    def loop(*plugins):
        return SimpleNamespace(dataloader=[0] * 9, train_epochs=3, plugins=list(plugins))

    assert planned_steps(loop(Limit())) == 10 and planned_steps(loop()) == 27
    assert planned_steps(SimpleNamespace(dataloader=iter([]), train_epochs=3)) is None     # no length: no switch


def test_retrain_settings_are_checked():
    assert RegionSize().retrain == 0.0                                          # off unless asked for
    from cl_graft.errors import UserError

    for bad in ({"retrain": 1.0}, {"retrain": -0.1}, {"shrink": -1}, {"shrink": 1.5}):
        with pytest.raises(UserError):
            RegionSize(**bad)
