"""What the size search costs, cut without changing what it decides: the number format of its passes
(cl_graft.strategies.graft.sizing.precision: auto is bfloat16 products exactly where the device computes them
natively, grafts made in place inside a pass are seen by the next one, a model that fails with bfloat16 products falls
back to float32, the format is recorded and checked), the rungs taken from one ranking, and the refinement judged
on the held-out rows alone (the finder runs without selection passes of its own)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

pytest.importorskip("avalanche")

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.region import Region
from cl_graft.strategies import ExperienceData, LocalizeFinder, RegionSize, SizedFinder
from cl_graft.strategies.graft.sizing.ladder import Ladder
from cl_graft.strategies.graft.sizing import precision
from cl_graft.machine import native_bfloat16
from cl_graft.strategies.graft.sizing.precision import products, search_dtype

CPU = torch.device("cpu")
QUICK = LocalizeFinder("graft", LocalizeConfig(steps=2, select_rows=64))
SIZE = RegionSize(ladder=(0.01, 0.02, 0.05, 0.1, 0.2))


def _task(n: int, seed: int) -> TensorDataset:
    """x ~ N(0, 1) in 100 dims; y = [x_0 + … + x_9 > 0]; task label 0."""
    x = torch.randn(n, 100, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, :10].sum(1) > 0).long(), torch.zeros(n, dtype=torch.long))


def _models(cls=nn.Linear) -> tuple[nn.Module, nn.Module]:
    """θ_pre = 0; θ_ft: weight 1 on the 10 signal inputs of class 1, tiny weights elsewhere."""
    pre, ft = cls(100, 2, bias=False), cls(100, 2, bias=False)
    with torch.no_grad():
        pre.weight.zero_()
        ft.weight.copy_(1e-3 * torch.randn(2, 100, generator=torch.Generator().manual_seed(0)))
        ft.weight[1, :10] = 1.0
    return pre, ft


class FloatOut(nn.Linear):
    """Writes its products into a float32 tensor, as Avalanche's MultiHeadClassifier does for a batch of task
    labels: fails under bfloat16 autocast."""

    def forward(self, x):
        out = torch.zeros(x.shape[0], self.out_features)
        out[torch.arange(x.shape[0])] = super().forward(x)
        return out


def _search(size: RegionSize, cls=nn.Linear) -> dict:
    pre, ft = _models(cls)
    data = ExperienceData(_task(64, 1), criterion=nn.CrossEntropyLoss(), held_out=_task(400, 2))
    return SizedFinder(QUICK, size)(pre, ft, data, names=["weight"], candidates=None).meta["sizing"]


def test_auto_is_bfloat16_exactly_where_the_cpu_computes_it_natively_for_a_large_model():
    native = native_bfloat16(CPU)
    assert native == bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert search_dtype("auto", CPU, elements=10_646_784) == (torch.bfloat16 if native else torch.float32)  # MiniLM
    assert search_dtype("auto", CPU, elements=19_210) == torch.float32                    # split-digits' MLP
    for elements in (19_210, 10_646_784):
        assert search_dtype("float32", CPU, elements=elements) == torch.float32
        assert search_dtype("bfloat16", CPU, elements=elements) == torch.bfloat16
    assert not native_bfloat16(torch.device("meta"))


def test_a_weight_changed_in_place_inside_a_pass_is_seen_by_the_next():
    """The cast weights are not cached: the ladder grafts each rung in place between passes."""
    layer = nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with products(torch.bfloat16, CPU):
        before = layer(x)
        with torch.no_grad():
            layer.weight.mul_(2.0)
        after = layer(x)
    assert before.dtype == torch.bfloat16
    assert not torch.allclose(before.float(), after.float())
    with products(torch.float32, CPU):
        assert layer(x).dtype == torch.float32


def test_the_format_is_recorded_and_each_gives_the_same_size_on_a_clear_case(monkeypatch):
    chosen = {p: _search(replace(SIZE, precision=p)) for p in ("float32", "bfloat16", "auto")}
    assert chosen["float32"]["precision"] == "float32" and chosen["bfloat16"]["precision"] == "bfloat16"
    assert chosen["auto"]["precision"] == "float32"                              # 200 elements: too few
    monkeypatch.setattr(precision, "BFLOAT16_MIN_ELEMENTS", 200)
    chosen["large"] = _search(SIZE)
    assert chosen["large"]["precision"] == ("bfloat16" if native_bfloat16(CPU) else "float32")
    assert {r["share"] for r in chosen.values()} == {0.05}                       # 10 signal elements of 200
    assert chosen["float32"]["rungs"] == _search(replace(SIZE, precision="float32"))["rungs"]   # seeded: same


def test_a_model_that_fails_with_bfloat16_products_runs_its_search_in_float32(monkeypatch):
    monkeypatch.setattr(precision, "BFLOAT16_MIN_ELEMENTS", 200)                 # auto would take bfloat16
    record = _search(SIZE, FloatOut)
    assert record["precision"] == "float32" and record["share"] == 0.05
    if native_bfloat16(CPU):                                                     # auto tried bfloat16 first
        with pytest.raises(RuntimeError, match="dtype"):
            _search(replace(SIZE, precision="bfloat16"), FloatOut)              # asked for: no fallback


def test_an_unknown_format_is_refused():
    with pytest.raises(UserError, match="precision must be one of auto, float32, bfloat16"):
        RegionSize(precision="float16")


def test_each_rung_is_the_problems_own_top_k_with_its_ties():
    """Rungs come from one ranking of the largest asked for; each equals Problem.base_mask (ties to the lower
    index: the 10 planted weights are equal, and so are a block of the rest), in any order of asking."""
    pre, ft = _models()
    with torch.no_grad():
        ft.weight[0, 50:90] = 0.25                                              # 40 more tied elements
    data = ExperienceData(_task(64, 1), criterion=nn.CrossEntropyLoss(), held_out=_task(40, 2))
    ladder = Ladder(SIZE, QUICK.config, 1.0, pre, ft, data, names=["weight"], candidates=None)
    for k in (20, 5, 10, 3, 60, 33, 1, 200, 49, 0):
        assert torch.equal(ladder.base_mask(k), ladder.prob.base_mask(k)), k


class Counted(ExperienceData):
    """Counts the selection scores asked of it (the finder's own selection passes)."""

    scores = 0

    def score(self, model, split, *, limit, seed):
        Counted.scores += 1
        return super().score(model, split, limit=limit, seed=seed)


@dataclass(frozen=True)
class Moved:
    """A finder that returns the rung's region with ``moved`` of its elements swapped for the next ones outside
    it (``config`` as the sized finder needs); with ``moved=0`` the rung's own region."""

    config: LocalizeConfig = LocalizeConfig(steps=2)
    moved: int = 0

    def __call__(self, pre, ft, data, *, names, candidates):
        base = LocalizeFinder("topk", self.config)(pre, ft, data, names=names, candidates=candidates)
        flat = base.masks["weight"].reshape(-1).clone()
        inside, outside = flat.nonzero().squeeze(1), (~flat).nonzero().squeeze(1)
        flat[inside[:self.moved]], flat[outside[:self.moved]] = False, True
        return Region.adopt({"weight": flat.reshape(2, 100)}, {"method": "moved"})


def test_refinement_runs_the_finder_without_selection_passes_and_keeps_only_a_higher_score():
    pre, ft = _models()
    data = Counted(_task(64, 1), criterion=nn.CrossEntropyLoss(), held_out=_task(400, 2))
    Counted.scores = 0
    record = SizedFinder(QUICK, SIZE)(pre, ft, data, names=["weight"], candidates=None).meta["sizing"]
    assert Counted.scores == 0 and record["share"] == 0.05                      # the held-out rows decide
    same = SizedFinder(Moved(), SIZE)(pre, ft, data, names=["weight"], candidates=None)
    assert same.meta["sizing"]["refined_same"] and same.meta["method"] == "moved"
    worse = SizedFinder(Moved(moved=10), SIZE)(pre, ft, data, names=["weight"], candidates=None)
    assert not worse.meta["sizing"]["refined_same"] and worse.meta["sizing"]["refined_gain"] < 0
    assert worse.meta["method"] == "topk"                                        # the rung's region kept
    tie = SizedFinder(Moved(moved=1), replace(SIZE, ladder=(0.2,)))(pre, ft, data, names=["weight"], candidates=None)
    assert tie.meta["sizing"]["refined_gain"] == 0 and tie.meta["method"] == "topk"   # a tie keeps the rung's
