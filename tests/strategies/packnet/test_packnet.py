"""PackNet on a tiny transformer: prune by magnitude among free elements, release the rest (to θ_pre or zero),
freeze bit-exactly."""
from __future__ import annotations

import pytest
import torch
from avalanche.training.templates import SupervisedTemplate
from cl_graft.strategies import StepLimit, TaskAdapter
from cl_graft.strategies.packnet.plugin import PackNetPlugin

from helpers.toy_streams import TASKS, LrPerExperience, Probe, acc, bits, build_model, evaluator, make_opt, make_stream

STEPS = 12


@pytest.fixture(scope="module")
def bm():
    return make_stream()


def run_packnet(bm, **kw):
    model = TaskAdapter(build_model(), TASKS)
    plugin, probe = PackNetPlugin(steps=STEPS, prune_at=0.5, **kw), Probe()
    strategy = SupervisedTemplate(model=model, optimizer=make_opt(model, "adamw"), train_mb_size=16,
                                  train_epochs=STEPS, eval_mb_size=16, evaluator=evaluator(),
                                  plugins=[plugin, probe, StepLimit(STEPS), LrPerExperience()])
    results = []
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(100 + i)
        strategy.train(exp)
        results.append(strategy.eval(bm.test_stream))
    return plugin, probe, results


@pytest.fixture(scope="module")
def packnet_run(bm):
    return run_packnet(bm, release="zero")


def test_released_elements_return_to_pre_bit_exactly(bm):
    pre = {n: p.detach().clone() for n, p in build_model().named_parameters()}
    plugin, probe, results = run_packnet(bm)                          # the default: release to θ_pre
    first = plugin.owners.patches[0].region
    for n, m in (~first).masks.items():
        assert torch.equal(bits(probe.states[0][n])[m], bits(pre[n])[m]), n
    assert acc(results[1], 0) == acc(results[0], 0)


def test_unknown_release_is_refused():
    from cl_graft.errors import UserError

    with pytest.raises(UserError, match="release must be one of"):
        PackNetPlugin(steps=STEPS, release="random")


def test_even_split_and_zeroed_release(packnet_run):
    plugin, probe, _ = packnet_run
    owners = plugin.owners
    first, second = (p.region for p in owners.patches)
    assert first.size == round(first.numel / 2)                     # task 0 of 2 keeps half
    assert (first | second).size == first.numel                      # the last task takes everything left
    after0 = probe.states[0]
    released = ~first
    assert all(bool((after0[n][m] == 0).all()) for n, m in released.masks.items())
    kept_weights = torch.cat([after0[n][m].abs() for n, m in first.masks.items()])
    assert float(kept_weights.min()) > 0                             # the largest weights were kept


def test_zero_forgetting_and_frozen_bits(packnet_run):
    plugin, probe, results = packnet_run
    first = plugin.owners.patches[0].region
    after0, after1 = probe.states
    for n, m in first.masks.items():
        assert torch.equal(bits(after0[n])[m], bits(after1[n])[m]), n
    assert acc(results[1], 0) == acc(results[0], 0)
    owned = sum(p.region.size for p in plugin.owners.patches)
    assert plugin.owners.bytes()["regions"] <= first.numel + 4 * owned   # an owner byte per element at most
