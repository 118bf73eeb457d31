"""``joint-probe``: the frozen encoder's ceiling (a classifier on every class at once, only the heads train), and
the ceilings labelled as such."""
from __future__ import annotations

import pytest

from helpers import intents_env

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
from cl_graft.strategies.comparison.clock import train_experience
from cl_graft.strategies.comparison.runner import _build, _row, fresh_model
from cl_graft.strategies.interface.config import continual_setup


def test_joint_probe_trains_only_the_heads_on_every_class_at_once(tmp_path):
    env = intents_env(tmp_path)
    data, cfg = continual_setup("smoke", seed=0, steps=100)
    setup = find_family("split-intents:3").setup(StreamRequest(
        spec="split-intents:3", scenario="class", data=data, seed=0, model=str(env / "model"),
        data_dir=str(env / "data")))
    stream, _ = setup.make()
    model, _ = fresh_model(setup.base, stream, 0)
    before = {n: p.detach().clone() for n, p in model.clf.named_parameters()}
    strategy = _build(STRATEGIES["joint-probe"], model, cfg, strategy_settings("joint-probe", data, seed=0), 3 * 100,
                      stream=stream, report=None)
    train_experience(strategy, stream.benchmark.train_stream, 0)
    moved = {n for n, p in model.clf.named_parameters() if not p.detach().equal(before[n])}
    assert moved and all(n.startswith("heads.") for n in moved), moved
    final = _row(strategy.eval(stream.benchmark.test_stream), 3)
    assert min(final) > 0.3, final                       # every experience's classes learned (chance: 1 in 6)


def test_ceilings_are_labelled_as_such():
    for name in ("joint", "joint-probe"):
        assert STRATEGIES[name].help.startswith("ceiling, not a continual method"), name
        assert STRATEGIES[name].fit == "whole-stream"
