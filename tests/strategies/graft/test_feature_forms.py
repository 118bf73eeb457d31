"""Forms of the router's feature statistics (full, lowrank:R, diagonal, mean): what each keeps, that it round-trips
through the saved skills with its bytes counted exactly as written, that tampered files are refused, that each
routes a small synthetic problem; and routing through a single-head model's output layer."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

avalanche = pytest.importorskip("avalanche")

from cl_graft.strategies import OwnerMap, TaskRouter, graft_target
from cl_graft.strategies.routing.feature_store import FEATURES_FILE, load_stats, save_stats
from cl_graft.strategies.routing.features import (
    DEFAULT_FORM,
    FeatureAccumulator,
    FeatureRouter,
    FeatureStats,
    feature_layer,
    output_layer,
    parse_form,
)

from cl_graft.errors import UserError
from cl_graft.regions.region import Region

FORMS = ("full", "lowrank:3", "diagonal", "mean")
D = 6


def task_rows(k: int, n: int = 200, seed: int = 0) -> torch.Tensor:
    """Task k's features ``(n, D)``: a mean of its own (3 on coordinate k) and a covariance shared by the tasks
    with a strong correlated direction, so that the covariance matters (rows drawn by ``seed``)."""
    g = torch.Generator().manual_seed(100 * seed + k)
    z = torch.randn(n, D, generator=g)
    shared = torch.randn(n, 1, generator=g) * 3 * torch.ones(1, D)              # spread along (1, ..., 1)
    return z + shared + 3 * torch.eye(D)[k]


def fitted(form: str, tasks: int = 3) -> list[FeatureStats]:
    out = []
    for k in range(tasks):
        acc = FeatureAccumulator()
        acc.update(task_rows(k))
        out.append(acc.finish(form))
    return out


def test_forms_keep_what_they_say():
    full = fitted("full")[0]
    assert full.form == "full" and set(full.tensors()) == {"mean", "cov"} and full.nbytes() == 4 * (D + D * D)
    low = full.reduce("lowrank:3")
    assert low.form == "lowrank:3" and low.basis.shape == (3, D) and low.nbytes() == 4 * (D + 3 * D + D)
    assert torch.allclose(low.covariance().diagonal(), full.cov.double().diagonal(), atol=1e-5)  # diagonal exact
    top = torch.linalg.eigvalsh(full.cov.double())[-1]
    assert torch.isclose((low.basis[0].double() ** 2).sum(), top, rtol=1e-4)           # largest eigenvalue first
    diag = full.reduce("diagonal")
    assert diag.form == "diagonal" and diag.nbytes() == 8 * D and torch.equal(diag.var, full.cov.diagonal())
    mean = full.reduce("mean")
    assert mean.form == "mean" and mean.covariance() is None and mean.nbytes() == 4 * D
    assert full.reduce(f"lowrank:{D}").form == "full"                                 # no smaller than full
    assert [parse_form(f) for f in ("full", "lowrank:16", "mean")] == [("full", 0), ("lowrank", 16), ("mean", 0)]
    for bad in ("lowrank", "lowrank:0", "low", "full:2", "diagonal:1"):
        with pytest.raises(UserError, match="is not one of"):
            parse_form(bad)
    with pytest.raises(UserError, match="keep no covariance"):
        mean.reduce("full")
    assert parse_form(DEFAULT_FORM)


def test_each_form_routes_held_out_rows():
    """Held-out rows of three tasks: the pooled covariance (full, lowrank) undoes the shared spread that the
    diagonal and the nearest mean fall for."""
    test = [task_rows(k, 300, seed=1) for k in range(3)]
    ids = {}
    for form in FORMS:
        router = FeatureRouter(fitted(form))
        ids[form] = sum(int((router.scores(f).argmax(0) == k).sum()) for k, f in enumerate(test)) / 900
    assert ids["full"] >= 0.95 and ids["lowrank:3"] >= ids["full"] - 0.01, ids
    assert 0.5 < ids["mean"] <= ids["diagonal"] < ids["full"] - 0.03, ids


def two_task_map(form: str) -> OwnerMap:
    model = nn.Linear(D, 2)
    owners = OwnerMap({"weight": model.weight})
    for task, row in (("a", 0), ("b", 1)):
        mask = torch.zeros(2, D, dtype=torch.bool)
        mask[row] = True
        owners.add_(model, task, Region.adopt({"weight": mask}))
    owners.features = dict(zip(("a", "b"), fitted(form, 2)))
    return owners


@pytest.mark.parametrize("form", FORMS)
def test_each_form_round_trips_and_counts_what_is_written(tmp_path, form):
    owners = two_task_map(form)
    owners.save(tmp_path, pre=True)
    written = load_file(tmp_path / FEATURES_FILE)
    assert sum(t.numel() * t.element_size() for t in written.values()) == owners.bytes()["features"]
    assert [b["features"] for b in owners.task_bytes()] == [s.nbytes() for s in owners.features.values()]
    loaded = OwnerMap.load(tmp_path, nn.Linear(D, 2))
    for t, s in owners.features.items():
        got = loaded.features[t]
        assert got.form == s.form == form and got.count == s.count
        assert all(torch.equal(got.tensors()[n], v) for n, v in s.tensors().items())
    assert loaded.bytes() == owners.bytes()


def tampered(tmp_path, change) -> None:
    stats = fitted("lowrank:3", 2)
    counts = save_stats(tmp_path, stats)
    tensors = load_file(tmp_path / FEATURES_FILE)
    change(tensors)
    save_file(tensors, tmp_path / FEATURES_FILE)
    load_stats(tmp_path, counts)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.__setitem__("2.mean", torch.zeros(D)), "tensor '2.mean' belongs to no task"),
    (lambda t: t.__setitem__("1.cov", torch.eye(D)), "statistics of task 1 are missing or malformed"),
    (lambda t: t.pop("0.var"), "statistics of task 0 are missing or malformed"),
    (lambda t: t.__setitem__("0.var", -torch.ones(D)), "not a covariance of 200 rows"),
    (lambda t: t.__setitem__("1.basis", torch.zeros(3, D + 1)), "shapes that do not fit"),
    (lambda t: t.__setitem__("1.basis", torch.zeros(D, D)), "shapes that do not fit"),
    (lambda t: t.update({"1.class_means": torch.zeros(2, D), "1.class_counts": torch.ones(2),
                         "1.class_labels": torch.tensor([3.0, 1.0])}), "not ascending integers"),
])
def test_tampered_statistics_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(UserError, match=message) as err:
        tampered(tmp_path, change)
    assert "\n" not in str(err.value)


def test_single_head_features_are_the_output_layers_input():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(5, 4)
    assert output_layer(model, lambda: model(x)) is model[2]
    assert feature_layer(model, [], lambda: model(x)) is model[2]
    root = nn.Module()
    root.body, root.heads = nn.Linear(2, 2), nn.ModuleList([nn.Linear(2, 1)])
    assert feature_layer(root, ["heads.0.weight"], lambda: None) is root.heads[0]       # no forward pass needed
    assert feature_layer(root, ["weight"], lambda: None) is None                         # heads without a module
    with pytest.raises(UserError, match="calls no module with parameters"):
        output_layer(nn.ReLU(), lambda: None)


def test_single_head_router_reads_the_output_layer_at_theta_pre():
    """A single-head model: every tensor is graftable, there are no head tensors; the router reads the input of
    its last Linear with every region rolled back, and routes by it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, 3))
    owners = OwnerMap({"0.weight": model[0].weight})
    for task, row in (("0", 0), ("1", 1)):
        mask = torch.zeros(16, D, dtype=torch.bool)
        mask[row] = True
        owners.add_(model, task, Region.adopt({"0.weight": mask}))
    pre_hidden = model[1](model[0](task_rows(0)))
    with torch.no_grad():
        model[0].weight[:2] += 1.0                                                         # the tasks' regions
    router = TaskRouter(graft_target(model), owners)
    with torch.no_grad():
        assert torch.allclose(router.features(task_rows(0)), pre_hidden.detach(), atol=1e-6)   # θ_pre
    assert router.feature_layer(task_rows(0)) is model[2]
    owners.features = {}
    for k, task in enumerate(("0", "1")):
        acc = FeatureAccumulator()
        acc.update(router.features(task_rows(k)))
        owners.features[task] = acc.finish(DEFAULT_FORM)
    _, chosen = router.infer(torch.cat([task_rows(0, 50), task_rows(1, 50)]), "features")
    assert float((chosen == torch.tensor([0] * 50 + [1] * 50)).float().mean()) >= 0.9
    router.close_()


def _blob_stream(classes_per_task: int = 2, tasks: int = 2):
    """Gaussian blobs in D dims, one class per blob; experiences of ``classes_per_task`` global classes with task
    labels (Avalanche's ``nc_benchmark``)."""
    from avalanche.benchmarks import nc_benchmark
    from torch.utils.data import TensorDataset

    n_classes = classes_per_task * tasks
    centres = torch.randn(n_classes, D, generator=torch.Generator().manual_seed(0)) * 3

    def blobs(n: int, seed: int) -> TensorDataset:
        y = torch.arange(n_classes).repeat(n // n_classes)
        ds = TensorDataset(centres[y] + torch.randn(len(y), D, generator=torch.Generator().manual_seed(seed)), y)
        ds.targets = y.tolist()
        return ds

    return nc_benchmark(blobs(128, 1), blobs(64, 2), n_experiences=tasks, task_labels=True, seed=0,
                        fixed_class_order=list(range(n_classes)))


def test_single_head_graft_strategy_routes_by_features():
    """The class-incremental setting on a single-head model: statistics fitted at the output layer's input, in
    the default form, and the test rows routed by them (2 forward passes per row)."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin
    from cl_graft.strategies import GraftStrategy, LocalizeFinder, TaskInferenceAccuracy

    from cl_graft.regions.config import LocalizeConfig

    bm = _blob_stream()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, 4))
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True), TaskInferenceAccuracy(), loggers=[])
    strategy = GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=16,
                             train_epochs=2, eval_mb_size=64, evaluator=evaluator, task_inference="features",
                             finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=4, select_rows=64)))
    for exp in bm.train_stream:
        strategy.train(exp)
    owners = strategy.graft.owners
    assert [owners.features[t].form for t in owners.tasks] == [DEFAULT_FORM] * 2
    assert [owners.features[t].count for t in owners.tasks] == [64, 64]
    metrics = strategy.eval(bm.test_stream)
    assert metrics["TaskInference_Acc_Stream/eval_phase/test_stream"] >= 0.95


def test_class_scenario_serves_graft_by_features_and_packnet_by_entropy():
    """``cl-graft run --scenario class``: graft's builder routes by features (any model), PackNet by entropy."""
    from types import SimpleNamespace

    from cl_graft.strategies.graft.entry import _stream_mode
    from cl_graft.strategies.routing.rules import class_scenario_rule
    from cl_graft.strategies.graft.settings import GraftSettings

    model = nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, 4))
    for scenario, later, graft, packnet, stats in (("class", None, "features", "entropy", None),
                                                   ("task", None, None, None, None),
                                                   ("task", "features", None, None, True),   # --task-inference
                                                   ("task", "entropy", None, None, None)):
        ctx = SimpleNamespace(scenario=scenario, settings=GraftSettings(), plugins=[], progress=False, resumed=None,
                              task_inference=later,
                              stream=SimpleNamespace(benchmark=SimpleNamespace(test_stream=[])), template={
                                  "model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)})
        plugin = _stream_mode(ctx).graft
        assert plugin.task_inference == graft and class_scenario_rule(ctx.scenario) == packnet
        assert plugin.feature_stats is stats                  # collected in the class scenario and for --task-inference


def test_feature_form_is_a_strategy_setting_saved_with_the_run(tmp_path):
    import json

    from cl_graft.strategies import GraftPlugin, GraftStrategy, LocalizeFinder

    from cl_graft.regions.config import LocalizeConfig

    def strategy(model, **kw):
        return GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=32,
                             finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=2, select_rows=32)),
                             **kw)

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, 4))

    with pytest.raises(UserError, match="'lowrank:0' is not one of"):
        GraftPlugin(feature_form="lowrank:0")
    first = strategy(mlp(), feature_form="diagonal", feature_stats=True)
    first.train(_blob_stream().train_stream[0])
    assert first.graft.owners.features["0"].form == "diagonal"
    first.save(tmp_path / "run")
    loaded = GraftStrategy.load(tmp_path / "run", model=mlp(), optimizer=torch.optim.SGD(mlp().parameters(), lr=0.1))
    assert loaded.graft.feature_form == "diagonal" and loaded.graft.owners.features["0"].form == "diagonal"
    assert loaded.graft.feature_stats is True
    record = tmp_path / "run" / "graft_run.json"
    cfg = json.loads(record.read_text())
    cfg["settings"]["feature_form"] = "lowrank:x"
    record.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="field 'settings.feature_form' is not valid"):
        GraftStrategy.load(tmp_path / "run", model=mlp(), optimizer=torch.optim.SGD(mlp().parameters(), lr=0.1))


def test_statistics_are_fitted_on_at_most_feature_rows_evenly_spaced_examples():
    """A dataset longer than ``rows`` passes ``rows`` evenly spaced examples (both classes of a class-sorted
    dataset), a shorter one all of them; the mean is that of the examples passed."""
    from torch.utils.data import TensorDataset

    from cl_graft.strategies.graft.feature_fit import FEATURE_ROWS, pre_features, spread, stats_of

    def fit_task_features(*args, **kwargs):
        return stats_of(pre_features(*args, **kwargs), "lowrank:32")

    assert spread(5, 8) == [0, 1, 2, 3, 4] and spread(10, 4) == [0, 2, 5, 7] and FEATURE_ROWS == 512
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, 2))
    target = graft_target(model)
    params = dict(target.root.named_parameters())
    owners = OwnerMap({n: params[n] for n in target.names()})
    owners.add_(target.root, "0", Region.empty({n: params[n].shape for n in target.names()}), head_names=[])
    y = torch.arange(2).repeat_interleave(300)                                  # class-sorted: 300 + 300
    x = torch.randn(600, D, generator=torch.Generator().manual_seed(1)) + 3 * y[:, None]
    data = TensorDataset(x, y, torch.zeros(600, dtype=torch.long))
    stats = fit_task_features(target, owners, 0, [data], device="cpu", rows=100)
    assert stats.count == 100
    with torch.no_grad():
        hidden = model[1](model[0](x[spread(600, 100)]))                         # the output layer's input
    torch.testing.assert_close(stats.mean, hidden.mean(0))
    assert fit_task_features(target, owners, 0, [data], device="cpu").count == 512
    assert fit_task_features(target, owners, 0, [data], device="cpu", rows=1000).count == 600
    assert fit_task_features(target, owners, 0, [data], device="cpu", rows=None).count == 600
    feats, labels = pre_features(target, owners, 0, [data, data], device="cpu", rows=None)
    assert torch.equal(labels, torch.cat([y, y]))                 # the datasets' order, whatever the batching
