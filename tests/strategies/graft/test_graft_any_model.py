"""GraftStrategy on models that are not cl-graft's TaskAdapter: Avalanche's MTSimpleMLP on a benchmark from
Avalanche's own generator, a tiny Hugging Face BERT wrapped as a user would; region finders on an MLP; task
inference; resume; bad input."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

avalanche = pytest.importorskip("avalanche")

from avalanche.benchmarks import nc_benchmark
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.models import MTSimpleMLP
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate
from cl_graft.strategies import (
    ExperienceData,
    GraftPlugin,
    GraftStrategy,
    LocalizeFinder,
    OwnerMap,
    TaskIdentificationAccuracy,
    TaskRouter,
    experience_regions,
    graft_target,
)

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.methods import REGION_METHODS, find_region
from cl_graft.regions.region import Region

from helpers.toy_streams import EvalOutputs

FINDER = LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=4, select_rows=64))
DIM, CLASSES = 16, 4


def _blobs(n: int, seed: int) -> TensorDataset:
    """Four Gaussian blobs in 16 dims (class c around a fixed random centre); ``targets`` for Avalanche."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    x = centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed))
    ds = TensorDataset(x, y)
    ds.targets = y.tolist()
    return ds


def blob_benchmark(train: TensorDataset | None = None, test: TensorDataset | None = None):
    """Two experiences of two classes each, task labels 0 and 1 (Avalanche's ``nc_benchmark``; default: blobs)."""
    return nc_benchmark(train or _blobs(128, 1), test or _blobs(64, 2), n_experiences=2, task_labels=True, seed=0, fixed_class_order=[0, 1, 2, 3])


@pytest.fixture(scope="module")
def bm():
    return blob_benchmark()


def mlp(seed: int = 0) -> MTSimpleMLP:
    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=DIM, hidden_size=32)


def strategy_for(model, probe=None, **kw) -> GraftStrategy:
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), TaskIdentificationAccuracy(), loggers=[])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    return GraftStrategy(model=model, optimizer=opt, train_mb_size=16, train_epochs=3, eval_mb_size=32,
                         evaluator=evaluator, plugins=[probe] if probe else [], **{"finder": FINDER, **kw})


def acc(metrics: dict, j: int) -> float:
    return metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"]


def run(bm, model, *, stop=2, **kw):
    probe = EvalOutputs()
    strategy = strategy_for(model, probe, **kw)
    results = []
    for i, exp in enumerate(bm.train_stream[:stop]):
        torch.manual_seed(100 + i)
        strategy.train(exp)
        results.append(strategy.eval(bm.test_stream[:i + 1]))
    return strategy, probe, results


@pytest.fixture(scope="module")
def mlp_run(bm):
    return run(bm, mlp(), feature_stats=True)


def test_feature_statistics_are_collected_only_when_routing_reads_them(bm):
    """By default a task's statistics are collected when the plugin routes by features at the end of its
    experience; otherwise none (asking for feature routing then says how to get them) and no time is spent."""
    plain, _, _ = run(bm, mlp(), stop=1)
    assert plain.graft.owners.features == {} and plain.graft.feature_seconds == [0.0]
    with pytest.raises(UserError, match="no feature statistics .* task_inference='features' or feature_stats=True"):
        _eval_routed(plain, bm.test_stream[:1], "features")
    routed, _, _ = run(bm, mlp(), stop=1, task_inference="features")
    assert list(routed.graft.owners.features) == ["0"] and routed.graft.feature_seconds[0] > 0
    with pytest.raises(UserError, match="no feature statistics"):                  # never: nothing to route by
        run(bm, mlp(), stop=1, task_inference="features", feature_stats=False)
    with pytest.raises(UserError, match="feature_stats must be True, False or None"):
        strategy_for(mlp(), feature_stats="yes")


def test_mtsimplemlp_forgets_nothing_bit_exact(bm, mlp_run):
    strategy, probe, results = mlp_run
    after_first = [t.clone() for t in probe.out[0]]
    assert acc(results[0], 0) == acc(results[1], 0) >= 0.9
    strategy.eval(bm.test_stream[:1])
    assert all(torch.equal(a, b) for a, b in zip(after_first, probe.out[0], strict=True))
    owners = strategy.graft.owners
    assert owners.tasks == ["0", "1"]
    assert owners.names == ["features.0.weight", "features.0.bias"]               # heads are not graftable
    assert list(owners.patches[1].extra) == ["classifier.classifiers.1.classifier.weight",
                                             "classifier.classifiers.1.classifier.bias"]   # stored whole per task


def test_mtsimplemlp_reconstruction_modes_agree(bm, mlp_run):
    strategy, probe, _ = mlp_run
    by_mode = {}
    for mode in ("experience", "minibatch"):
        strategy.graft.reconstruct = mode
        strategy.eval(bm.test_stream)
        by_mode[mode] = {k: [t.clone() for t in v] for k, v in probe.out.items()}
    strategy.graft.reconstruct = "experience"
    for k, outs in by_mode["experience"].items():
        assert all(torch.equal(a, b) for a, b in zip(outs, by_mode["minibatch"][k], strict=True))


def test_plain_template_with_the_plugin_matches(bm, mlp_run):
    _, probe, _ = mlp_run
    model, plain_probe = mlp(), EvalOutputs()
    plugin = GraftPlugin(finder=FINDER)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    plain = SupervisedTemplate(model=model, optimizer=opt, train_mb_size=16, train_epochs=3, eval_mb_size=32,
                               evaluator=EvaluationPlugin(loggers=[]), plugins=[plugin, plain_probe])
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(100 + i)
        plain.train(exp)
    plain.eval(bm.test_stream)
    assert all(torch.equal(a, b) for a, b in zip(probe.out[0], plain_probe.out[0], strict=True))


def _eval_routed(strategy, stream, how: str) -> dict:
    """The test stream's metrics with task labels withheld (routing rule ``how``), then back to task-aware."""
    strategy.graft.task_inference = how
    try:
        return strategy.eval(stream)
    finally:
        strategy.graft.task_inference = None


def test_task_inference_reports_identification_accuracy(bm, mlp_run):
    strategy, _, _ = mlp_run
    metrics = _eval_routed(strategy, bm.test_stream, "entropy")
    counts = strategy.graft.task_id
    for j in (0, 1):
        key = f"TaskInference_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"
        assert metrics[key] == counts[j][0] / counts[j][1]
    total = sum(c[0] for c in counts.values()) / sum(c[1] for c in counts.values())
    assert metrics["TaskInference_Acc_Stream/eval_phase/test_stream"] == pytest.approx(total)


def test_task_inference_picks_the_confident_task():
    """Task 0 owns weight column 0, task 1 column 2: each input is confident only under its own task."""
    model = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    owners = OwnerMap({"weight": model.weight})
    for task, col in (("0", 0), ("1", 2)):
        mask = torch.zeros(2, 4, dtype=torch.bool)
        mask[:, col] = True
        with torch.no_grad():
            model.weight[:, col] = torch.tensor([4.0, -4.0])
        owners.add_(model, task, Region.adopt({"weight": mask}))
    router = TaskRouter(graft_target(model), owners)
    x = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1.0, 0], [0, 0, -1.0, 0]])
    for how in ("entropy", "max-softmax"):
        _, chosen = router.infer(x, how)
        assert chosen.tolist() == [0, 1, 1]
    router.close_()
    assert torch.equal(model.weight[:, 2], torch.tensor([4.0, -4.0]))              # put back


def test_feature_statistics_are_head_inputs_at_theta_pre(bm, mlp_run):
    """Each task's statistics: the inputs of the heads over its training examples, at θ_pre."""
    from cl_graft.strategies.routing.features import FeatureAccumulator
    from cl_graft.strategies.head_inputs import HeadInputs

    strategy, _, _ = mlp_run
    owners = strategy.graft.owners
    assert [owners.features[t].count for t in ("0", "1")] == [64, 64]
    router = TaskRouter(graft_target(strategy.model), owners)
    strategy.model.eval()
    router.switch_(-1)
    for k in (0, 1):
        x = torch.stack([x for x, *_ in bm.train_stream[k].dataset])
        with torch.no_grad(), HeadInputs(router.feature_layer(x)) as rec:
            strategy.model(x, 0)
        acc = FeatureAccumulator()
        acc.update(rec.take(len(x)))
        want = acc.finish(owners.features[str(k)].form)
        for name, value in want.tensors().items():
            assert torch.allclose(owners.features[str(k)].tensors()[name], value, atol=1e-5), name
    router.close_()


def test_feature_routing_identifies_the_tasks(bm, mlp_run):
    strategy, _, _ = mlp_run
    metrics = _eval_routed(strategy, bm.test_stream, "features")
    assert metrics["TaskInference_Acc_Stream/eval_phase/test_stream"] >= 0.9         # entropy: 0.75 here
    assert acc(metrics, 0) >= 0.9 and acc(metrics, 1) >= 0.9


def test_collecting_statistics_changes_nothing(bm, mlp_run, monkeypatch):
    strategy, probe, _ = mlp_run
    monkeypatch.setattr(GraftPlugin, "_fit_features", lambda *a: None)
    without, without_probe, _ = run(bm, mlp())
    assert without.graft.owners.features == {}
    for n, p in without.model.named_parameters():
        assert torch.equal(p, dict(strategy.model.named_parameters())[n]), n
    for how in (None, "entropy", "max-softmax"):                              # task-aware and confidence routing
        for s in (strategy, without):
            s.graft.task_inference = how
            s.eval(bm.test_stream)
            s.graft.task_inference = None
        for k in (0, 1):
            assert all(torch.equal(a, b) for a, b in zip(probe.out[k], without_probe.out[k], strict=True))


def test_resume_equals_uninterrupted(bm, mlp_run, tmp_path):
    strategy, probe, results = mlp_run
    first, _, _ = run(bm, mlp(), stop=1)
    first.graft.owners.save(tmp_path / "skills")
    model = mlp()                                         # θ_pre again; heads and head masks come from
    avalanche_model_adaptation(model, bm.train_stream[0])  # Avalanche's adaptation to the trained experiences
    owners = OwnerMap.load(tmp_path / "skills", model)
    owners.apply_(model)
    resumed_probe = EvalOutputs()
    resumed = strategy_for(model, resumed_probe, owners=owners)
    torch.manual_seed(101)
    resumed.train(bm.train_stream[1])
    again = resumed.eval(bm.test_stream)
    assert acc(again, 1) == acc(results[1], 1)
    strategy.eval(bm.test_stream)
    for n, p in strategy.model.named_parameters():
        assert torch.equal(p, dict(model.named_parameters())[n]), n
    for k in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(probe.out[k], resumed_probe.out[k], strict=True))


def test_paper_mode_on_an_mlp(bm):
    from avalanche.training import Naive

    def train(model, exp):
        torch.manual_seed(5)
        Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=16, train_epochs=2,
              evaluator=EvaluationPlugin(loggers=[])).train(exp)

    model = mlp()
    pre = {n: p.detach().clone() for n, p in model.named_parameters()}
    regions = experience_regions(model, bm.train_stream, train, FINDER)
    assert all(torch.equal(p, pre[n]) for n, p in model.named_parameters())        # the caller's model untouched
    assert set(regions) == {"0", "1"} and all(0 < r.size for r in regions.values())
    strategy, _, results = run(bm, model, mode="paper", regions=regions)
    owners = strategy.graft.owners
    for k, task in enumerate(owners.tasks):
        assert (owners.patches[k].region - regions[task]).is_empty
    assert acc(results[0], 0) == acc(results[1], 0)


def test_export_a_task_state_dict(bm, mlp_run, tmp_path):
    from cl_graft.strategies.graft.export import export_task, load_task_model

    strategy, probe, _ = mlp_run
    strategy.eval(bm.test_stream[:1])
    export_task(strategy.graft.owners, strategy.model, "0", tmp_path / "task0")
    model = load_task_model(tmp_path / "task0", model=mlp(7))   # another init: task 0's tensors come from the file
    x = torch.stack([bm.test_stream[0].dataset[i][0] for i in range(len(bm.test_stream[0].dataset))])
    assert torch.equal(model(x[:32], torch.zeros(32, dtype=torch.long)), probe.out[0][0])
    with pytest.raises(UserError, match="no skill for task"):
        export_task(strategy.graft.owners, strategy.model, "7", tmp_path / "x")


class HFClassifier(nn.Module):
    """A Hugging Face model wrapped the way Avalanche's NLP notes do: x = (B, 2, L) ids + attention mask."""

    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, x):
        return self.hf(input_ids=x[:, 0], attention_mask=x[:, 1]).logits


def _token_blobs(n: int, seed: int) -> TensorDataset:
    """Class c: eight random tokens, one of them ``10 + c`` (vocabulary 32)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    ids = torch.randint(14, 32, (len(y), 8), generator=g)
    ids[torch.arange(len(y)), torch.randint(0, 8, (len(y),), generator=g)] = 10 + y
    ds = TensorDataset(torch.stack([ids, torch.ones_like(ids)], 1), y)           # (N, 2, 8)
    ds.targets = y.tolist()
    return ds


def test_tiny_hf_bert_forgets_nothing():
    from transformers import BertConfig, BertForSequenceClassification

    bm = blob_benchmark(_token_blobs(96, 1), _token_blobs(48, 2))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, num_labels=CLASSES)
    model = HFClassifier(BertForSequenceClassification(cfg))
    strategy, probe, results = run(bm, model, graftable=r"encoder\.layer\.|classifier")
    after_first = [t.clone() for t in probe.out[0]]
    strategy.eval(bm.test_stream[:1])
    assert all(torch.equal(a, b) for a, b in zip(after_first, probe.out[0], strict=True))
    assert acc(results[0], 0) == acc(results[1], 0)
    names = strategy.graft.owners.names
    assert "hf.classifier.weight" in names and not any("embeddings" in n for n in names)


def test_region_finders_on_an_mlp(bm):
    model = mlp()
    avalanche_model_adaptation(model, bm.train_stream[0])
    ft = mlp(1)
    avalanche_model_adaptation(ft, bm.train_stream[0])
    data = ExperienceData(bm.train_stream[0].dataset, criterion=nn.CrossEntropyLoss(), task="0")
    names = graft_target(model).names()
    free = Region.random({n: tuple(p.shape) for n, p in model.named_parameters() if n in names}, 300, seed=0)
    cfg = LocalizeConfig(region_elements=40, steps=3, select_rows=32, seed=0)
    with pytest.raises(UserError, match="fim-layers .* text rows"):      # ranks a text classifier's layers
        find_region("fim-layers", model, ft, data, [], cfg, names=names, candidates=free, progress=False)
    for method in (m for m in REGION_METHODS if m != "fim-layers"):
        region = find_region(method, model, ft, data, [], cfg, names=names, candidates=free, progress=False).region
        again = find_region(method, model, ft, data, [], cfg, names=names, candidates=free, progress=False).region
        assert region == again and 0 < region.size <= 40, method
        assert (region - free).is_empty, method
        assert region.meta["task"] == "0" and region.meta["model"] == "MTSimpleMLP"


def test_bad_input_is_refused_before_training(bm):
    with pytest.raises(UserError, match="matches nothing|no graftable"):
        run(bm, mlp(), graftable=r"^nothing$")
    head_only = nn.Sequential(nn.Linear(DIM, CLASSES))
    with pytest.raises(UserError, match="no graftable"):
        run(bm, head_only, graftable=lambda n, p: False)
    greedy, _, _ = run(bm, mlp(), stop=1, finder=LocalizeFinder("topk", LocalizeConfig(region_size=0.6)))
    before = {n: p.detach().clone() for n, p in greedy.model.named_parameters()}
    with pytest.raises(UserError, match="a region of .* elements is larger than the .* free graftable elements; "
                                        "lower --region-size"):
        greedy.train(bm.train_stream[1])                  # 60% more of the 40% left
    assert all(torch.equal(p, before[n]) for n, p in greedy.model.named_parameters() if n in before)
    from avalanche.benchmarks.scenarios import benchmark_from_datasets, with_classes_timeline
    from avalanche.benchmarks.scenarios.task_aware import with_task_labels

    both = bm.train_stream[0].dataset.concat(bm.train_stream[1].dataset)
    mixed = with_classes_timeline(with_task_labels(benchmark_from_datasets(train=[both], test=[both])))
    model = mlp()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(UserError, match="one task per experience"):
        strategy_for(model).train(mixed.train_stream[0])
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)
    strategy, _, _ = run(bm, mlp(), stop=1)
    with pytest.raises(UserError, match="already learned"):
        strategy.train(bm.train_stream[0])
    with pytest.raises(UserError, match="task_inference must be one of"):
        GraftPlugin(task_inference="guess")
