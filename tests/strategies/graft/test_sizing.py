"""Automatic per-task region size (cl_graft.strategies.graft.sizing): the ladder search on a constructed model, the
held-out validation split, capacity warnings and the "error" policy, resume, and zero forgetting throughout."""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

avalanche = pytest.importorskip("avalanche")

from avalanche.benchmarks import nc_benchmark
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.models import MTSimpleMLP
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from avalanche.training.plugins import EvaluationPlugin
from cl_graft.strategies import (
    CapacityWarning,
    ExperienceData,
    GraftStrategy,
    LocalizeFinder,
    OwnerMap,
    RegionSize,
    SizedFinder,
)
from cl_graft.strategies.graft.sizing import sizing_records
from cl_graft.strategies.graft.sizing.ladder import allowed

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.problem import Problem
from cl_graft.regions.region import Region

from helpers import cli

DIM, CLASSES = 16, 4
QUICK = LocalizeFinder("graft", LocalizeConfig(steps=2, select_rows=64))


# ----- the search on a constructed model --------------------------------------------------------------
def _sum_task(n: int, seed: int) -> TensorDataset:
    """x ~ N(0, 1) in 100 dims; y = [x_0 + … + x_9 > 0]; task label 0 (Avalanche's ``[x, y, t]``)."""
    x = torch.randn(n, 100, generator=torch.Generator().manual_seed(seed))
    y = (x[:, :10].sum(1) > 0).long()
    return TensorDataset(x, y, torch.zeros(n, dtype=torch.long))


def _planted() -> tuple[nn.Linear, nn.Linear]:
    """θ_pre = 0; θ_ft puts weight 1 on the 10 signal inputs of class 1 (10 elements = 5% of the 200) and tiny
    weights elsewhere."""
    pre = nn.Linear(100, 2, bias=False)
    ft = nn.Linear(100, 2, bias=False)
    with torch.no_grad():
        pre.weight.zero_()
        ft.weight.copy_(1e-3 * torch.randn(2, 100, generator=torch.Generator().manual_seed(0)))
        ft.weight[1, :10] = 1.0
    return pre, ft


def test_search_goes_down_to_the_smallest_rung_the_rows_vouch_for():
    """θ_pre = 0; θ_ft puts weight 1 on the 10 signal inputs of class 1 (10 elements = 5% of the 200) and
    tiny weights elsewhere: from the top rung down, 20%, 10% and 5% lose nothing on 400 held-out rows, 2% (4
    signal inputs) loses accuracy, so the search stops there and keeps 5%."""
    pre, ft = _planted()
    data = ExperienceData(_sum_task(64, 1), criterion=nn.CrossEntropyLoss(), held_out=_sum_task(400, 2))
    size = RegionSize(ladder=(0.01, 0.02, 0.05, 0.1, 0.2))
    region = SizedFinder(QUICK, size)(pre, ft, data, names=["weight"], candidates=None)
    record = region.meta["sizing"]
    assert [r["share"] for r in record["rungs"]] == [0.1, 0.05, 0.02]            # stops at the first not vouched
    assert [r["vouched"] for r in record["rungs"]] == [True, True, False]         # the cap (20%) is never scored
    assert record["rungs"][2]["loss"] > 0.02 and record["rungs"][1]["loss"] <= 0.0
    assert all(r["settled"] and r["beliefs_bound"] is None for r in record["rungs"])   # 400 labelled rows decide
    assert record["share"] == 0.05 and region.size == 10 and record["met"] and record["below_cap"]
    assert record["validation"] == "dev" and record["rows"] == 400
    assert bool(region.masks["weight"][1, :10].all())                           # the signal elements
    base = Problem.build(pre, ft, LocalizeConfig(region_elements=10), names=["weight"]).base_mask(10)
    kept = record["refined_same"] or record["refined_gain"] > 0                   # the finder's region kept or not
    assert (region.meta.get("method") == "topk") == (not kept)
    assert record["refined_same"] == bool(region.masks["weight"].reshape(-1).eq(base).all())
    rung = SizedFinder(QUICK, replace(size, refine=False))(pre, ft, data, names=["weight"], candidates=None)
    again = rung.meta["sizing"]
    assert again["share"] == 0.05 and again["rungs"] == record["rungs"]         # the same search, no finder
    assert rung.meta["method"] == "topk" and "refined_gain" not in again        # the rung's own region
    assert bool(rung.masks["weight"].reshape(-1).eq(base).all())
    assert torch.equal(pre.weight, torch.zeros(2, 100))                          # inputs untouched


def test_search_takes_the_cap_when_few_rows_cannot_vouch_for_less():
    """The constructed model of the test above with 20 held-out rows: the 5% rung keeps every row, but 20
    rows cannot show it loses at most 2 points, so the task keeps the largest rung it may take (its cap)."""
    pre, ft = _planted()
    data = ExperienceData(_sum_task(64, 1), criterion=nn.CrossEntropyLoss(), held_out=_sum_task(20, 2))
    size = RegionSize(ladder=(0.01, 0.02, 0.05, 0.1, 0.2))
    record = SizedFinder(QUICK, size, allowance=0.15)(pre, ft, data, names=["weight"],
                                                      candidates=None).meta["sizing"]
    assert [r["share"] for r in record["rungs"]] == [0.1, 0.15]                  # the cap scored once chosen
    assert record["rungs"][0]["loss"] == 0.0 and not record["rungs"][0]["vouched"]
    assert record["elements"] == 30 and record["rows"] == 20 and record["met"] and not record["below_cap"]
    lenient = SizedFinder(QUICK, replace(size, tolerance=0.2))(pre, ft, data, names=["weight"], candidates=None)
    assert lenient.meta["sizing"]["share"] == 0.05                              # bound ≈ 14 points on 20 rows


def test_allowance_splits_every_tensors_free_elements_over_the_tasks_to_come():
    """Task t of T may take 1 / (T − t + reserve) of the free elements: with one share in reserve the last
    task keeps half of what is free (it trains in both halves); without, all of it; a task outside its stream,
    or with no stream, plans for a stream twice as long as the tasks seen so far."""
    size = RegionSize(expected_tasks=4)
    assert [size.allowance(t) for t in range(4)] == [1 / 5, 1 / 4, 1 / 3, 1 / 2]
    assert [replace(size, reserve=0).allowance(t) for t in range(4)] == [1 / 4, 1 / 3, 1 / 2, 1]
    auto = RegionSize()
    assert [auto.allowance(t, 20) for t in (0, 19)] == [1 / 21, 1 / 2]          # inside a 20-task stream
    assert auto.allowance(0, None) == 1 / 3 and auto.allowance(29, None) == 1 / 32   # open-ended: doubling
    assert auto.allowance(5, 1) == auto.allowance(5, None)                      # one stream per experience
    open_plan = RegionSize(plan="open")                                          # told nothing of the length
    assert [open_plan.allowance(t, 20) for t in (0, 19)] == [1 / 3, 1 / 22] == [auto.allowance(t) for t in (0, 19)]
    free = 1.0
    for t in range(30):                                                         # every task takes its allowance
        free *= 1 - auto.allowance(t, 1)
    assert free == pytest.approx(1 / 2 * 3 / 32)                                # the 31st still finds 4.7%


def test_allowance_is_taken_from_every_tensor():
    """The candidates of a task are ⌊allowance · free⌋ elements of each tensor (largest |Δ| first), so a tensor
    nearly full keeps its last free elements for later tasks even when its |Δ| is the largest."""
    pre, ft = nn.Linear(10, 10), nn.Linear(10, 10)
    with torch.no_grad():
        ft.weight.copy_(pre.weight + 0.01)
        ft.bias.copy_(pre.bias + 5.0)                                            # the bias has the largest |Δ|
    names = ["weight", "bias"]
    free = Region({"weight": torch.ones(10, 10, dtype=torch.bool), "bias": torch.arange(10) < 4})
    prob = Problem.build(pre, ft, LocalizeConfig(region_elements=1), names=names, candidates=free)
    mask = allowed(prob, 0.5)
    assert int(mask[:100].sum()) == 50 and int(mask[100:].sum()) == 2 and not bool(mask[104:].any())


def test_size_settings_are_checked():
    for bad in ({"tolerance": -0.1}, {"tolerance": 1.0}, {"ladder": (0.1, 0.01)}, {"ladder": "0.1"},
                {"on_full": "ignore"}, {"expected_tasks": 0}, {"expected_tasks": 2.5}, {"expected_tasks": True},
                {"holdout": 1.0}, {"confidence": 0.4}, {"confidence": 1.0}, {"reserve": -1}, {"reserve": 0.5},
                {"reserve": 10 ** 6}, {"rows": 1.5}, {"rows": float("nan")}, {"tolerance": float("nan")}, {"plan": "closed"},
                {"plan": "open", "expected_tasks": 5}):
        with pytest.raises(UserError, match=next(iter(bad))):
            RegionSize(**bad)
    assert RegionSize(tolerance=np.float32(0.05), rows=np.int64(100)).rows == 100
    with pytest.raises(UserError, match="not both"):
        GraftStrategy(model=nn.Linear(2, 2), optimizer=torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1),
                      finder=QUICK, region_size=0.05)
    model = nn.Linear(2, 2)
    fixed = GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                          region_size=np.float32(0.05))
    assert fixed.graft.finder.config.region_size == pytest.approx(0.05)


# ----- in a stream ----------------------------------------------------------------------------------------
def _blobs(n: int, seed: int, shift: float = 0.0) -> TensorDataset:
    """Four Gaussian blobs in 16 dims (each row distinct); ``shift`` moves every row (test rows differ)."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    x = centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed)) + shift
    ds = TensorDataset(x, y)
    ds.targets = y.tolist()
    return ds


@pytest.fixture(scope="module")
def bm():
    return nc_benchmark(_blobs(160, 1), _blobs(64, 2, shift=1e-3), n_experiences=2, task_labels=True, seed=0,
                        fixed_class_order=[0, 1, 2, 3])


class Rows(SupervisedPlugin):
    """Records, per experience, the rows the strategy may train on and the rows of every training batch."""

    def __init__(self):
        super().__init__()
        self.adapted: dict[int, set] = {}
        self.trained: dict[int, set] = {}

    def after_train_dataset_adaptation(self, strategy, **kw):
        ds = strategy.adapted_dataset
        self.adapted[strategy.experience.current_experience] = {_key(ds[i][0]) for i in range(len(ds))}

    def after_training_iteration(self, strategy, **kw):
        self.trained.setdefault(strategy.experience.current_experience, set()).update(map(_key, strategy.mb_x))


def _key(x: torch.Tensor) -> tuple:
    return tuple(x.tolist())


def _strategy(model, *plugins, **kw) -> GraftStrategy:
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return GraftStrategy(model=model, optimizer=opt, train_mb_size=16, train_epochs=3, eval_mb_size=64,
                         evaluator=evaluator, plugins=list(plugins), **kw)


def _mlp(seed: int = 0) -> MTSimpleMLP:
    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=DIM, hidden_size=32)


def _single_head(seed: int = 0) -> nn.Module:
    """A plain single-head MLP: every layer, the output layer too, is graftable."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def _acc(metrics: dict, j: int) -> float:
    return metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"]


def _run(bm, strategy, experiences):
    rows = []
    for i in experiences:
        torch.manual_seed(100 + i)
        strategy.train(bm.train_stream[i])
        rows.append(strategy.eval(bm.test_stream[:i + 1]))
    return rows


class SaveFirst(SupervisedPlugin):
    """Saves the owner map after the first experience (what an interrupted run leaves)."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def after_training_exp(self, strategy, **kw):
        if strategy.experience.current_experience == 0:
            strategy.graft.owners.save(self.folder)


@pytest.fixture(scope="module")
def default_run(bm, tmp_path_factory):
    rows, skills = Rows(), tmp_path_factory.mktemp("run") / "skills"
    strategy = _strategy(_mlp(), rows, SaveFirst(skills))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = _run(bm, strategy, [0, 1])
    return strategy, rows, results, skills


def test_held_out_rows_come_from_training_data_and_are_never_trained(bm, default_run):
    _, rows, _, _ = default_run
    test = {_key(bm.test_stream[i].dataset[j][0]) for i in range(2) for j in range(len(bm.test_stream[i].dataset))}
    for i, exp in enumerate(bm.train_stream):
        every = {_key(exp.dataset[j][0]) for j in range(len(exp.dataset))}
        held = every - rows.adapted[i]
        assert len(held) == -(-len(every) // 10)                        # ⌈10%⌉ of the experience's rows
        assert not held & test                                          # no test row is ever a validation row
        assert rows.trained[i] <= rows.adapted[i] and not rows.trained[i] & held


def test_default_size_is_recorded_and_nothing_is_forgotten(default_run):
    strategy, _, results, _ = default_run
    records = sizing_records(strategy.graft.owners)
    assert [r["task"] for r in records] == ["0", "1"]
    for r in records:
        assert r["validation"] == "dev" and r["met"] and r["loss"] <= 0.02 and 0 < r["share"] <= r["cap_share"]
    assert [r["allowance"] for r in records] == [1 / 3, 1 / 2]          # 2 tasks + 1 share in reserve
    assert records[0]["cap_share"] == pytest.approx(1 / 3, abs=0.01)     # ⌊1/3⌋ of each tensor
    assert records[1]["cap_share"] == pytest.approx(records[0]["free"] / 2, abs=0.01)
    assert records[1]["free"] == pytest.approx(1 - records[0]["share"] - records[1]["share"])
    assert _acc(results[0], 0) == _acc(results[1], 0)                    # forgetting exactly 0


def test_split_is_the_same_on_resume_and_sizes_are_kept(bm, default_run):
    strategy, rows, results, skills = default_run
    first = strategy.graft.owners
    model = _mlp()                                                       # θ_pre again, heads replayed
    avalanche_model_adaptation(model, bm.train_stream[0])
    owners = OwnerMap.load(skills, model)
    assert sizing_records(owners) == sizing_records(first)[:1]            # the chosen size is saved with the skills
    assert sizing_records(owners)[0]["seconds"] > 0
    owners.apply_(model)
    resumed_rows = Rows()
    resumed = _strategy(model, resumed_rows, owners=owners)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _run(bm, resumed, [1])
    assert resumed_rows.adapted[1] == rows.adapted[1]                    # the same held-out rows
    assert _sizes(resumed.graft.owners) == _sizes(first)                 # the same choice for task 1 too
    assert _acc(again[0], 0) == _acc(results[1], 0) and _acc(again[0], 1) == _acc(results[1], 1)


def _sizes(owners) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("seconds", "search_seconds")} for r in sizing_records(owners)]


def test_a_task_that_cannot_reach_its_target_warns_or_stops(bm):
    """One element (the ladder's only rung) of a single-head MLP trained from scratch cannot hold a task: a
    warning naming the task, the accuracy it lost and the free share; with ``on_full="error"`` a UserError that
    records nothing and leaves no trained value of the task outside θ_pre."""
    size = RegionSize(ladder=(1e-4,), tolerance=0.0)
    strategy = _strategy(_single_head(), region_size=size)
    torch.manual_seed(0)
    with pytest.warns(CapacityWarning, match=r"task '0' lost [0-9.]+ points of its trained model's dev accuracy "
                                             r"\(tolerance 0\) with 0\.[0-9]+% .*; 100\.0% were free"):
        strategy.train(bm.train_stream[0])
    owners = strategy.graft.owners
    record = sizing_records(owners)[0]
    assert not record["met"] and record["loss"] > 0 and record["kept"] < 1.0 and record["elements"] == 1
    strategy.graft.finder = SizedFinder(strategy.graft.finder.finder, replace(size, on_full="error"))
    with pytest.raises(UserError, match=r"task '1' lost .*; 99\.9% were free.*; give --expected-tasks or a larger "
                                        r"--tolerance \(RegionSize expected_tasks="):
        strategy.train(bm.train_stream[1])
    assert owners.tasks == ["0"]
    params = dict(strategy.model.named_parameters())
    for n, m in owners.free().masks.items():                             # nothing of task 1 left behind
        assert torch.equal(params[n].detach()[m], owners.pre[n][m])


def _noise(n: int, seed: int) -> TensorDataset:
    """Inputs as in ``_blobs`` but with labels drawn independently of them: nothing to learn."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    ds = TensorDataset(torch.randn(len(y), DIM, generator=g), y[torch.randperm(len(y), generator=g)])
    ds.targets = ds.tensors[1].tolist()
    return ds


def test_a_task_at_chance_warns_even_when_its_graft_keeps_its_trained_score():
    """Labels independent of the inputs: the trained model is at chance on the held-out rows and the grafted
    model keeps that (tolerance 50 points), so the size is "met", yet the task is not silent: a warning that it is not
    surely above chance, with its score, the chance level and the free share; ``on_full="error"`` stops."""
    noise = nc_benchmark(_noise(1600, 1), _noise(64, 2), n_experiences=2, task_labels=True, seed=0,
                         fixed_class_order=[0, 1, 2, 3])
    size = RegionSize(tolerance=0.5)
    strategy = _strategy(_mlp(), region_size=size)
    torch.manual_seed(0)
    with pytest.warns(CapacityWarning, match=r"task '0' scores [0-9.]+% on its 80 dev rows \(its trained model "
                                             r"[0-9.]+%\), not surely above chance \(5[0-9.]+%, its most frequent "
                                             r"training class\); it trained in the 100\.0% of the graftable elements"):
        strategy.train(noise.train_stream[0])
    record = sizing_records(strategy.graft.owners)[0]
    assert record["met"] and not record["above_chance"] and record["score_low"] <= record["chance"]
    strategy.graft.finder = SizedFinder(strategy.graft.finder.finder, replace(size, on_full="error"))
    with pytest.raises(UserError, match=r"task '1' scores .* not surely above chance .*more free elements "
                                        r"\(--expected-tasks"):
        strategy.train(noise.train_stream[1])
    assert strategy.graft.owners.tasks == ["0"]


def test_a_task_that_learned_is_above_chance(default_run):
    """The blobs of the default run are learned: each task's grafted model is surely above chance."""
    records = sizing_records(default_run[0].graft.owners)
    assert all(r["above_chance"] and r["score_low"] > r["chance"] for r in records)
    assert all(0.5 <= r["chance"] < 0.6 for r in records)                  # two classes, balanced


def test_a_run_refusal_names_the_option_of_run(env, tmp_path):
    """``cl-graft run --region-size`` too small for one element is refused naming ``--region-size`` (the option of
    the command the user ran, and of every other command), never an option ``run`` does not have."""
    out = tmp_path / "out"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--region-size", "1e-9", "--out", str(out))
    assert result.exit_code == 2 and "--region-size 1e-09 selects no element" in result.output, result.output
    assert "sparsity" not in result.output and "budget" not in result.output
