"""What learn_region saves without changing what it computes: S's seeded draws, made once per N and seed, the
attention kernel of its gradient passes under CPU bfloat16 products, each step's rows grouped by length,
top-k selections that rank only the elements they choose among, and no selection passes for a caller that judges
the region itself (eval_every=0)."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
import torch

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.data import TextRegionData, by_length
from cl_graft.regions.learned import SCALE_SAMPLE, _draws, gradient_attention, learn_region
from cl_graft.regions.problem import Problem, hard_region
from cl_graft.regions.region import graftable_names
from cl_graft.training.evaluate import text_length
from cl_graft.training.models import clone_model

from helpers import SENTIMENT, alternating_sentiment_rows, tiny_bert

CPU = torch.device("cpu")


def _graph(t: torch.Tensor) -> set[str]:
    """The names of the autograd nodes behind ``t``."""
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(nxt for nxt, _ in node.next_functions)
    return names


def _fused(t: torch.Tensor) -> bool:
    return any("Flash" in name for name in _graph(t))


def test_draws_are_the_seeded_generator_once():
    n = SCALE_SAMPLE + 7
    gen = torch.Generator().manual_seed(3)
    init, perm = torch.rand(n, generator=gen), torch.randperm(n, generator=gen)[:SCALE_SAMPLE]
    first = _draws(n, 3, True)
    assert torch.equal(first[0], init) and torch.equal(first[1], perm)
    assert _draws(n, 3, True)[0] is first[0]                                  # drawn once, then shared
    assert first[1].untyped_storage().nbytes() == SCALE_SAMPLE * 8              # not a view of all N indices
    assert _draws(50, 3, False)[1] is None and torch.equal(_draws(50, 3, False)[0], torch.rand(
        50, generator=torch.Generator().manual_seed(3)))


def _moved(scale: float) -> tuple:
    """θ_pre (a tiny BERT with the toy task), θ_ft = θ_pre + ``scale`` · noise, and 32 rows of the toy task."""
    torch.manual_seed(0)
    pre = tiny_bert()
    pre.add_task(SENTIMENT)
    ft = clone_model(pre)
    with torch.no_grad():
        for p in ft.parameters():
            p.add_(scale * torch.randn_like(p))
    return pre, ft, alternating_sentiment_rows(random.Random(0), 32, fillers=4, neutral=["it", "was", "a", "movie"])


def test_learn_region_leaves_the_shared_draws_alone():
    pre, ft, rows = _moved(0.01)
    numel = sum(p.numel() for n, p in pre.named_parameters() if n in graftable_names(pre.named_parameters()))
    cfg = LocalizeConfig(region_size=0.05, steps=6, lr=2.0, batch_size=8, n_batches=1, seed=4)
    before = _draws(numel, 4, False)[0].clone()
    one = learn_region(pre, ft, rows, rows[:8], cfg, progress=False)
    two = learn_region(pre, ft, rows, rows[:8], cfg, progress=False)
    assert torch.equal(_draws(numel, 4, False)[0], before)                     # S was a copy
    assert one.history == two.history and all(torch.equal(one.region.masks[n], two.region.masks[n])
                                              for n in one.region.masks)


def test_gradient_passes_take_the_math_attention_under_cpu_bfloat16():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    enc = model.encode(alternating_sentiment_rows(random.Random(1), 4, fillers=4, neutral=["it", "was"]))
    with gradient_attention(CPU):                                               # float32: the default kernel
        assert _fused(model(**enc).sum())
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        assert _fused(model(**enc).sum())                                       # what it replaces
        with gradient_attention(CPU):
            plain = model(**enc)
        assert not _fused(plain.sum())
        assert torch.allclose(plain.float(), model(**enc).float(), atol=0.05)  # the same function


def test_step_batches_regrouped_by_length_keep_the_mean_loss():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    rng = random.Random(2)
    rows = [dict(r, text=r["text"] + " it" * rng.randrange(12))
            for r in alternating_sentiment_rows(rng, 16, fillers=2, neutral=["it", "was"])]
    batches = [rows[:8], rows[8:]]
    grouped = by_length(batches)
    assert [len(b) for b in grouped] == [8, 8] and sorted(map(id, rows)) == sorted(id(r) for b in grouped for r in b)
    assert max(map(text_length, grouped[0])) <= min(map(text_length, grouped[1]))
    padded = [sum(model.encode(b)["input_ids"].numel() for b in bs) for bs in (batches, grouped)]
    assert padded[1] < padded[0]                                                # fewer padded tokens

    def mean_loss(bs):
        labels = [torch.tensor([r["label"] for r in b]) for b in bs]
        return sum(torch.nn.functional.cross_entropy(model(**model.encode(b)), y) for b, y in zip(bs, labels)) / 2

    with torch.no_grad():
        assert torch.allclose(mean_loss(batches), mean_loss(grouped), atol=1e-6)
    tensors = [torch.zeros(4, 3), torch.ones(4, 3)]
    assert by_length(tensors) is tensors and by_length([rows[:3], rows[3:8]]) == [rows[:3], rows[3:8]]


def _topk_everywhere(scores: torch.Tensor, among: torch.Tensor, k: int) -> torch.Tensor:
    """The selection ranked over all N (−inf outside ``among``), as before the ranking read only ``among``."""
    k = min(k, int(among.sum()))
    if k <= 0:
        return torch.zeros_like(among)
    masked = torch.where(among, scores.float(), torch.tensor(-math.inf))
    return ops.topk_mask({"flat": masked}, k, absolute=False)["flat"]


def test_selections_read_only_their_elements_and_choose_the_same():
    gen = torch.Generator().manual_seed(5)
    n = 5000
    delta = torch.randint(-4, 5, (n,), generator=gen).float()                   # many ties
    cand = torch.rand(n, generator=gen) < 0.3
    prob = Problem(["w"], {"w": (n,)}, [(0, n)], torch.zeros(n), delta.clone(), delta, cand, 1, {})
    for k in (0, 1, 37, 400, int(cand.sum()), n):
        assert torch.equal(prob.base_mask(k), _topk_everywhere(delta.abs(), cand, k)), k
    base = prob.base_mask(400)
    logit = torch.randint(-3, 3, (n,), generator=gen).float()                   # ties, zeros, flips both ways
    hard = (logit > 0) ^ base
    for k in (10, 300, int(hard.sum()) - 1, int(hard.sum()), n):
        kept, dropped = hard_region(logit, base, k)
        want = _topk_everywhere(torch.where(base, -logit, logit), hard, k)
        assert torch.equal(kept, want) and torch.equal(dropped, hard & ~want), k


class _Counted(TextRegionData):
    scores = 0

    def score(self, model, split, *, limit, seed):
        _Counted.scores += 1
        return super().score(model, split, limit=limit, seed=seed)


def test_without_selection_the_last_region_is_returned_and_nothing_is_scored():
    pre, ft, rows = _moved(0.05)
    data = _Counted(rows, rows[:8], task=SENTIMENT.name)
    cfg = LocalizeConfig(region_size=0.05, steps=6, lr=4.0, sigmoid_bias=2.0, batch_size=8, n_batches=1, seed=1)
    _Counted.scores = 0
    selected = learn_region(pre, ft, data, [], cfg, progress=False)
    assert _Counted.scores > 0
    _Counted.scores = 0
    last = learn_region(pre, ft, data, [], replace(cfg, eval_every=0), progress=False)
    assert _Counted.scores == 0 and [h["step"] for h in last.history] == [0, 6]
    assert all(h["train"] is None and not h["rescored"] for h in last.history)
    assert last.region.meta["best_step"] == 6 and last.region.size == last.history[-1]["size"]
    assert last.history[-1]["flips_in"] > 0                                    # the steps moved the region
    assert [h["flips_in"] for h in selected.history if h["step"] == 6] == [last.history[-1]["flips_in"]]
    with pytest.raises(UserError, match="eval_every"):
        LocalizeConfig(eval_every=-1)
