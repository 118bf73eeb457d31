"""GraftStrategy / GraftPlugin on tiny models: bit-exact freezing, zero forgetting, reconstruction, resume."""
from __future__ import annotations

import math
import random

import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.grafting.patch_io import gap_bytes
from cl_graft.ops import random_mask
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.region import Region
from cl_graft.training.finetune import FinetuneConfig

avalanche = pytest.importorskip("avalanche")

from avalanche.training import Naive
from avalanche.training.templates import SupervisedTemplate
from cl_graft.strategies import (
    GraftPlugin,
    GraftStrategy,
    LocalizeFinder,
    OwnerMap,
    TaskAdapter,
    TaskRouter,
    independent_regions,
)

from helpers import sentiment_rows
from helpers.toy_streams import TASKS, LrPerExperience, Probe, acc, bits, build_model, evaluator, make_opt, make_stream

FINDER = LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=10, n_batches=4, select_rows=64))


@pytest.fixture(scope="module")
def bm():
    return make_stream()


def run_graft(bm, *, opt="adamw", guard=True, plugins=(), owners=None, start=0, stop=None, model=None, **kw):
    model = model or build_model()
    adapter = TaskAdapter(model, TASKS)
    probe = Probe()
    lr = [LrPerExperience()] if opt == "adamw" else []
    strategy = GraftStrategy(model=adapter, optimizer=make_opt(adapter, opt), train_mb_size=16,
                             train_epochs=10, eval_mb_size=16, evaluator=evaluator(),
                             plugins=[probe, *plugins, *lr], finder=FINDER, guard=guard, owners=owners, **kw)
    results = []
    for i, exp in enumerate(bm.train_stream):
        if start <= i < (stop or len(TASKS)):
            torch.manual_seed(100 + i)
            strategy.train(exp)
            results.append(strategy.eval(bm.test_stream))
    return strategy, probe, results


@pytest.fixture(scope="module")
def graft_run(bm):
    return run_graft(bm)


@pytest.mark.parametrize("opt,guard", [("sgd", False), ("adamw", False), ("sgd", True)])
def test_earlier_region_and_head_bit_identical(bm, opt, guard):
    strategy, probe, _ = run_graft(bm, opt=opt, guard=guard)
    owners = strategy.graft.owners
    after0, after1 = probe.states
    region0 = owners.patches[0].region
    assert region0.size > 0 and owners.patches[1].region.size > 0
    moved = 0
    for n, m in region0.masks.items():
        assert torch.equal(bits(after0[n])[m], bits(after1[n])[m]), n
        moved += int((after1[n] != after0[n]).sum())
    assert moved > 0                                            # task 1 did train something
    for n in after0:
        if n.startswith("heads.toy.") or ".embeddings." in n:
            assert torch.equal(bits(after0[n]), bits(after1[n])), n
    free = owners.free()
    for n, m in free.masks.items():                              # unowned elements are back at θ_pre
        assert torch.equal(bits(after1[n])[m], bits(owners.pre[n])[m]), n


def test_zero_forgetting_and_region_elements(graft_run):
    strategy, _, results = graft_run
    assert acc(results[1], 0) == acc(results[0], 0)
    assert acc(results[0], 0) >= 0.7                                  # well above chance (0.5)
    owners = strategy.graft.owners
    assert owners.tasks == TASKS
    elements = [p.region.size for p in owners.patches]
    assert all(0 < e <= int(0.3 * owners.patches[0].region.numel) for e in elements)
    numel = owners.patches[0].region.numel                              # float32 value + gap-coded index, or
    code = sum(gap_bytes(i) for p in owners.patches for i in p.indices.values())   # an owner byte per element
    assert sum(elements) <= code < 2 * sum(elements)
    assert owners.bytes()["regions"] == 4 * sum(elements) + min(code, numel)


def test_zero_forgetting_logits_across_experiences(bm):
    model = build_model()
    adapter = TaskAdapter(model, TASKS)
    probe = Probe()
    strategy = GraftStrategy(model=adapter, optimizer=make_opt(adapter, "adamw"), train_mb_size=16,
                             train_epochs=10, eval_mb_size=16, evaluator=evaluator(),
                             plugins=[probe, LrPerExperience()], finder=FINDER)
    torch.manual_seed(0)
    strategy.train(bm.train_stream[0])
    strategy.eval(bm.test_stream[:1])
    right_after = [t.clone() for t in probe.logits[0]]
    strategy.train(bm.train_stream[1])
    strategy.eval(bm.test_stream[:1])
    assert all(torch.equal(a, b) for a, b in zip(right_after, probe.logits[0], strict=True))


def test_naive_forgets_on_conflicting_stream(bm):
    adapter = TaskAdapter(build_model(), TASKS)
    naive = Naive(model=adapter, optimizer=make_opt(adapter, "adamw"), train_mb_size=16, train_epochs=10,
                  eval_mb_size=16, evaluator=evaluator(), plugins=[LrPerExperience()])
    results = []
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(100 + i)
        naive.train(exp)
        results.append(naive.eval(bm.test_stream))
    assert acc(results[0], 0) > 0.9
    assert acc(results[0], 0) - acc(results[1], 0) > 0.3          # graft: exactly 0 under the same recipe


def test_minibatch_and_experience_reconstruction_identical(bm, graft_run):
    strategy, probe, _ = graft_run
    plugin = strategy.graft
    by_mode = {}
    for mode in ("experience", "minibatch"):
        plugin.reconstruct = mode
        strategy.eval(bm.test_stream)
        by_mode[mode] = {k: [t.clone() for t in v] for k, v in probe.logits.items()}
    plugin.reconstruct = "experience"
    for k in by_mode["experience"]:
        pairs = zip(by_mode["experience"][k], by_mode["minibatch"][k], strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)
    assert plugin.evaluation.router is None                        # nothing left behind


def test_mixed_task_batches_match_per_task_logits(bm, graft_run):
    strategy, _, _ = graft_run
    adapter, plugin = strategy.model, strategy.graft
    collate = bm.test_stream[0].dataset.collate_fn
    rows = [bm.test_stream[t].dataset[i] for t in (0, 1) for i in range(6)]
    adapter.eval()
    before = {n: p.detach().clone() for n, p in adapter.clf.named_parameters()}
    router = TaskRouter(plugin.target(strategy), plugin.owners)
    try:
        expected = {}
        for t in (0, 1):                                          # per-experience batches (one task each)
            x, _, labels = collate(rows[6 * t:6 * t + 6])
            for i, logits in enumerate(router.forward(x, labels)):
                expected[6 * t + i] = logits
        order = random.Random(0).sample(range(len(rows)), len(rows))
        x, _, labels = collate([rows[i] for i in order])          # one mixed batch, shuffled
        mixed = router.forward(x, labels)
    finally:
        router.close_()
    assert all(torch.equal(mixed[j], expected[i]) for j, i in enumerate(order))
    assert all(torch.equal(p, before[n]) for n, p in adapter.clf.named_parameters())   # put back


def test_all_regions_mode_uses_current_model(bm, graft_run):
    strategy, probe, _ = graft_run
    strategy.graft.reconstruct = "all"
    try:
        strategy.eval(bm.test_stream[:1])
    finally:
        strategy.graft.reconstruct = "experience"
    dl = torch.utils.data.DataLoader(bm.test_stream[0].dataset, batch_size=16,
                                     collate_fn=bm.test_stream[0].dataset.collate_fn)
    with torch.no_grad():
        strategy.model.eval()
        direct = [strategy.model(x, t) for x, _, t in dl]
    assert all(torch.equal(a, b) for a, b in zip(direct, probe.logits[0], strict=True))


def test_resume_equals_uninterrupted(bm, graft_run, tmp_path):
    full, _, full_results = graft_run
    interrupted, _, _ = run_graft(bm, stop=1)
    interrupted.graft.owners.save(tmp_path / "skills")
    model = build_model()
    owners = OwnerMap.load(tmp_path / "skills", model)
    owners.apply_(model)
    resumed, _, results = run_graft(bm, owners=owners, start=1, model=model)
    assert results[-1] == full_results[-1]
    full_params = dict(full.model.clf.named_parameters())
    for n, p in resumed.model.clf.named_parameters():
        assert torch.equal(bits(p), bits(full_params[n])), n
    assert resumed.graft.owners.tasks == TASKS


def test_plugin_order_in_a_plain_template_does_not_change_results(bm, graft_run):
    _, _, reference = graft_run
    for order in ("graft-first", "graft-last"):
        model = TaskAdapter(build_model(), TASKS)
        graft, probe = GraftPlugin(finder=FINDER), Probe()
        lr = LrPerExperience()
        plugins = [graft, probe, lr] if order == "graft-first" else [probe, lr, graft]
        template = SupervisedTemplate(model=model, optimizer=make_opt(model, "adamw"), train_mb_size=16,
                                      train_epochs=10, eval_mb_size=16, evaluator=evaluator(), plugins=plugins)
        results = []
        for i, exp in enumerate(bm.train_stream):
            torch.manual_seed(100 + i)
            template.train(exp)
            results.append(template.eval(bm.test_stream))
        assert results == reference, order
        assert probe.calls.count("after_training_exp") == 2 and probe.calls.count("before_eval_exp") == 4


def test_paper_mode_trains_only_inside_given_regions(bm):
    model = build_model()
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters() if ".layer." in n}
    regions = {t: Region(random_mask(shapes, sum(map(math.prod, shapes.values())) // 4, seed=k))
               for k, t in enumerate(TASKS)}
    strategy, probe, results = run_graft(bm, mode="paper", regions=regions, model=model)
    owners = strategy.graft.owners
    assert owners.patches[0].region == regions["toy"]
    assert owners.patches[1].region == regions["flip"] - regions["toy"]
    outside = ~(regions["toy"] | regions["flip"])
    for n, m in outside.masks.items():
        assert torch.equal(bits(probe.states[1][n])[m], bits(owners.pre[n])[m]), n
    assert acc(results[1], 0) == acc(results[0], 0)


def test_independent_regions_fine_tune_copies(bm):
    model = build_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = {"toy": (sentiment_rows(32, 5, False), [])}
    recipe = FinetuneConfig(optimizer="adamw", lr=1e-2, batch_size=16, steps=6, eval_every=6)
    regions = independent_regions(model, data, recipe, FINDER, progress=False)
    assert set(regions) == {"toy"} and 0 < regions["toy"].size <= int(0.3 * regions["toy"].numel)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_training_a_task_twice_is_refused(bm, graft_run):
    strategy, _, _ = graft_run
    with pytest.raises(UserError, match="already learned"):
        strategy.train(bm.train_stream[0])


def test_owner_map_round_trip_and_wrong_model(graft_run, tmp_path):
    strategy, _, _ = graft_run
    owners = strategy.graft.owners
    owners.save(tmp_path / "skills")
    loaded = OwnerMap.load(tmp_path / "skills", build_model())
    assert loaded.tasks == owners.tasks and loaded.bytes() == owners.bytes()
    for task, patch in zip(TASKS, loaded.patches):              # a saved skill says how it was found
        meta = patch.region.meta
        assert meta["task"] == task and meta["method"] == "graft"
        assert meta["config"] == FINDER.config.to_json()
        assert meta["derived"] == [{"op": "&", "other": {"method": "free elements"}}]
    assert all(torch.equal(loaded.owner[n], owners.owner[n]) for n in owners.names)
    other = build_model()
    with torch.no_grad():
        next(p for n, p in other.named_parameters() if ".layer." in n).add_(1.0)
    with pytest.raises(UserError, match="another pre-trained model"):
        OwnerMap.load(tmp_path / "skills", other)
