"""Tests for cl_graft.regions.learned and cl_graft.regions.methods on a tiny BERT with a planted sparse skill."""
from __future__ import annotations

import random

import pytest
import torch

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.grafting.graft import graft_model
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.learned import learn_region
from cl_graft.regions.methods import REGION_METHODS, find_region
from cl_graft.regions.region import Region, graftable_names
from cl_graft.training.evaluate import evaluate
from cl_graft.training.models import clone_model

from helpers import SENTIMENT, alternating_sentiment_rows, tiny_bert

NEUTRAL = ["it", "was", "and", "a", "movie", "the", "film", "is", "plot", "news", "world", "question", "this"]
PLANTED = 300


def _rows(n: int, seed: int) -> list[dict]:
    """Five neutral words and one sentiment word at a random place; labels alternate."""
    return alternating_sentiment_rows(random.Random(seed), n, fillers=5, neutral=NEUTRAL)


def _state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def planted():
    """θ_pre (random tiny BERT, random frozen head) and θ_ft trained on a random set P of 300 elements only."""
    torch.manual_seed(0)
    pre = tiny_bert()
    pre.add_task(SENTIMENT)
    names = graftable_names(pre.named_parameters())
    pre_p = dict(pre.named_parameters())
    region = Region(ops.random_mask({n: pre_p[n].shape for n in names}, PLANTED, seed=0))
    ft = clone_model(pre).train()
    ft_p = dict(ft.named_parameters())
    for n, p in ft_p.items():
        p.requires_grad_(n in names)
    opt = torch.optim.Adam([ft_p[n] for n in names], lr=0.05)
    train, gen = _rows(128, 1), torch.Generator().manual_seed(0)
    for _ in range(500):
        batch = [train[i] for i in torch.randint(len(train), (16,), generator=gen).tolist()]
        labels = torch.tensor([r["label"] for r in batch])
        loss = torch.nn.functional.cross_entropy(ft(**ft.encode(batch)), labels)
        opt.zero_grad()
        loss.backward()
        for n in names:
            ft_p[n].grad.mul_(region.masks[n])
        opt.step()
        with torch.no_grad():                                   # Adam moments must not move anything else
            for n in names:
                ft_p[n].copy_(torch.where(region.masks[n], ft_p[n], pre_p[n]))
    for p in ft.parameters():
        p.requires_grad_(True)
    ft.zero_grad(set_to_none=True)
    return pre, ft.eval(), region, train, _rows(64, 2), _rows(128, 3)


def _acc(pre, ft, region, rows) -> float:
    return evaluate(graft_model(pre, ft, region), rows)[0]["accuracy"]


CFG = LocalizeConfig(region_size=PLANTED / 13578, steps=30, lr=1.0, n_batches=4, base_fraction=0.5, seed=0)


def test_learned_region_recovers_planted_skill(planted):
    pre, ft, region, train, dev, test = planted
    assert region.numel == 13578
    ft_acc = evaluate(ft, test)[0]["accuracy"]
    empty_acc = _acc(pre, ft, Region.empty(region.shapes), test)
    assert ft_acc >= 0.8 and empty_acc <= 0.6                 # the skill is real and lives in P
    res = learn_region(pre, ft, train, dev, CFG, progress=False)
    learned = res.region
    assert learned.size == learned.meta["size"] <= PLANTED == learned.meta["region_elements"]
    acc = _acc(pre, ft, learned, test)
    base_only = find_region("graft", pre, ft, train, dev, LocalizeConfig(**{**CFG.to_json(), "steps": 0}),
                            progress=False).region
    rand = find_region("random", pre, ft, train, dev,
                       LocalizeConfig(**{**CFG.to_json(), "region_elements": learned.size}), progress=False).region
    assert rand.size == learned.size and base_only.size == PLANTED // 2
    assert acc >= ft_acc - 0.05, (acc, ft_acc)
    assert acc >= _acc(pre, ft, rand, test) + 0.2
    assert acc > _acc(pre, ft, base_only, test)               # the gradient steps found more of the skill
    assert (learned & region).size >= 0.7 * learned.size      # mostly inside P (random: 2%)
    assert [h["step"] for h in res.history] == list(range(31)) and res.seconds > 0
    meta = learned.meta
    assert meta["method"] == "graft" and meta["config"] == CFG.to_json() and meta["numel"] == 13578
    assert set(meta["fingerprints"]) == {"pre", "ft"} and meta["best_step"] == max(
        res.history, key=lambda h: (h["train"] + h["dev"], -h["step"]))["step"]


def test_an_unchanged_region_keeps_its_scores_without_a_pass(planted):
    """With b / lr = 10 steps to flip, the first steps see the base region again: only step 0 and the steps
    whose hard region changed are scored, and the repeats carry the same scores."""
    pre, ft, _, train, dev, _ = planted
    res = learn_region(pre, ft, train, dev, LocalizeConfig(region_size=0.01, steps=12, lr=1.0, n_batches=1),
                       progress=False)
    rescored = [h["rescored"] for h in res.history]
    assert rescored[:10] == [True] + [False] * 9 and any(rescored[10:])        # flips start at step 10
    for before, h in zip(res.history, res.history[1:]):
        if not h["rescored"]:
            assert (h["train"], h["dev"]) == (before["train"], before["dev"])
            assert (h["flips_in"], h["flips_out"]) == (before["flips_in"], before["flips_out"])


def test_same_seed_same_bits_and_inputs_untouched(planted):
    pre, ft, _, train, dev, _ = planted
    before_pre, before_ft = _state(pre), _state(ft)
    modes = [m.training for m in (*pre.modules(), *ft.modules())]
    cfg = LocalizeConfig(region_size=0.01, steps=6, n_batches=2, seed=3)
    a = learn_region(pre, ft, train, dev, cfg, progress=False).region
    b = learn_region(pre, ft, train, dev, cfg, progress=False).region
    assert a == b and a.size <= 135
    for model, before in ((pre, before_pre), (ft, before_ft)):
        after = _state(model)
        assert all(torch.equal(before[n], after[n]) for n in before)
        assert all(p.requires_grad and p.grad is None for p in model.parameters())
    assert modes == [m.training for m in (*pre.modules(), *ft.modules())]


def test_budget_and_candidates(planted):
    pre, ft, region, train, dev, _ = planted
    free = ~region                                              # e.g. parameters no earlier task owns
    cfg = LocalizeConfig(region_size=0.01, steps=5, n_batches=2, region_elements=50, lr=3.0)
    for method in REGION_METHODS:
        r = find_region(method, pre, ft, train, dev, cfg, candidates=free, progress=False).region
        assert r.size <= 50 and r.meta["region_elements"] == 50 and r.meta["size"] == r.size, method
        assert (r & region).is_empty, method                   # never outside the candidates
        assert r.meta["candidates"] == free.size


@pytest.mark.parametrize("method", sorted(REGION_METHODS))
def test_methods_registry(planted, method):
    pre, ft, _, train, dev, _ = planted
    cfg = LocalizeConfig(region_size=0.005, steps=3, n_batches=2, seed=1)
    res = find_region(method, pre, ft, train, dev, cfg, progress=False)
    again = find_region(method, pre, ft, train, dev, cfg, progress=False)
    r = res.region
    assert r == again.region and r.meta["method"] == method and r.size <= 67 and not r.is_empty
    assert REGION_METHODS[method].paper.startswith("https://")
    if method in ("topk", "random", "bias", "fish", "lottery", "fim-layers"):
        assert r.size == 67
    if method == "bias":
        assert all(not c or n.endswith(".bias") for n, c in r.counts().items())
    if method == "lottery":
        assert r.meta["outside"] == "zero"
        grafted = dict(graft_model(pre, ft, r).named_parameters())
        n = next(n for n, c in r.counts().items() if c < r.masks[n].numel())
        assert bool((grafted[n].detach()[~r.masks[n]] == 0).all())
    else:
        assert r.meta["outside"] == "pre"
    if method == "random":
        other = find_region(method, pre, ft, train, dev, LocalizeConfig(region_size=0.005, seed=2), progress=False)
        assert other.region != r


def test_bad_input(planted):
    pre, ft, region, train, dev, _ = planted
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(UserError, match=r"--region-size must be in \(0, 1\]"):
            LocalizeConfig(region_size=bad)
    with pytest.raises(UserError, match="empty region"):
        find_region("topk", pre, ft, train, dev, LocalizeConfig(region_size=1e-6))
    with pytest.raises(UserError, match="empty region"):
        LocalizeConfig(region_elements=0)
    with pytest.raises(UserError, match="over the 13578"):
        find_region("topk", pre, ft, train, dev, LocalizeConfig(region_elements=20000))
    with pytest.raises(UserError, match="candidate region is empty"):
        find_region("graft", pre, ft, train, dev, LocalizeConfig(), candidates=region - region)
    with pytest.raises(UserError, match="unknown region method 'magic'"):
        find_region("magic", pre, ft, train, dev, LocalizeConfig())
    half = Region({n: m for n, m in list(region.masks.items())[:3]})
    with pytest.raises(UserError, match="does not match region"):
        find_region("topk", pre, ft, train, dev, LocalizeConfig(), candidates=half)
    other = tiny_bert("mlm")
    other.add_task(SENTIMENT)
    with pytest.raises(UserError, match="model has no tensor"):
        find_region("topk", other, ft, train, dev, LocalizeConfig())
    with pytest.raises(UserError, match="unknown localization setting 'lr_s'"):
        LocalizeConfig.from_json({"lr_s": 1})
    assert LocalizeConfig.from_json(CFG.to_json()) == CFG


@pytest.mark.parametrize("normalize, lr", [("budget", 2.0), ("max", 5.0), ("none", 1e7)])
def test_step_scalings_respect_the_budget(planted, normalize, lr):
    pre, ft, _, train, dev, _ = planted
    cfg = LocalizeConfig(region_size=0.01, steps=8, n_batches=2, lr=lr, normalize=normalize, base_fraction=0.5)
    res = learn_region(pre, ft, train, dev, cfg, progress=False)
    assert res.region.size <= 135 and len(res.history) == 9
    assert res.history[0]["size"] == 67 and res.region.meta["config"]["normalize"] == normalize


@pytest.mark.parametrize("n", [5000, 3_000_000])
def test_budget_scaling_moves_about_budget_elements(n):
    from cl_graft.regions.learned import SCALE_SAMPLE, _scale_step_

    gen = torch.Generator().manual_seed(0)
    u = torch.randn(n, generator=gen) * torch.rand(n, generator=gen).pow(8)    # heavy-tailed magnitudes
    sample = torch.randperm(n, generator=gen)[:SCALE_SAMPLE] if n > SCALE_SAMPLE else None
    step = _scale_step_(u.clone(), 1000, LocalizeConfig(lr=2.0), sample)
    full = int((step.abs() == 2.0).sum())
    assert step.abs().max() == 2.0 and bool((step * u >= 0).all())
    assert full == 1000 if sample is None else 800 <= full <= 1250, full
