"""Task inference by head-input feature statistics: the statistics and discriminant scores on hand-made cases,
routing on a constructed multi-head model where output confidence cannot tell the tasks apart, storage with the
skills, the error when a task has no statistics, the CLI option and the rules script."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

avalanche = pytest.importorskip("avalanche")

from avalanche.models import MultiTaskModule
from cl_graft.strategies import OwnerMap, TaskRouter, graft_target
from cl_graft.strategies.routing.feature_store import FEATURES_FILE
from cl_graft.strategies.routing.states import TASK_INFERENCE
from cl_graft.strategies.routing.features import (
    EPS,
    FeatureAccumulator,
    FeatureRouter,
    FeatureStats,
    head_module,
)
from cl_graft.strategies.head_inputs import HeadInputs

from cl_graft.errors import UserError
from cl_graft.regions.region import Region


def test_statistics_by_hand():
    f = torch.tensor([[0.0, 0.0], [2.0, 4.0], [4.0, 2.0], [2.0, 2.0]])          # mean (2, 2), cov [[2, 1], [1, 2]]
    one, split = FeatureAccumulator(), FeatureAccumulator()
    one.update(f)
    split.update(f[:1])
    split.update(f[1:3])
    split.update(f[3:])
    for acc in (one, split):
        stats = acc.finish("full")
        assert stats.count == 4
        assert torch.allclose(stats.mean, torch.tensor([2.0, 2.0]))
        assert torch.allclose(stats.cov, torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
    with pytest.raises(UserError, match="no features"):
        FeatureAccumulator().finish()


def test_router_scores_by_hand():
    a = FeatureStats(torch.tensor([0.0, 0.0]), torch.eye(2), 1)
    b = FeatureStats(torch.tensor([2.0, 0.0]), torch.eye(2), 1)
    router = FeatureRouter([a, b], shrink=0.0)
    scale = 1 + 2 * EPS                                                          # Σ = I·(1 + EPS·(1 + 1))
    want = torch.tensor([[0.0, -0.5 * 4 / 2 / scale], [-0.5 * 4 / 2 / scale, 0.0]])
    assert torch.allclose(router.scores(torch.tensor([[0.0, 0.0], [2.0, 0.0]])), want)
    shrunk = FeatureRouter([FeatureStats(torch.zeros(2), torch.tensor([[2.0, 1.0], [1.0, 2.0]]), 3)], shrink=0.1)
    sigma = 0.9 * torch.tensor([[2.0, 1.0], [1.0, 2.0]]) + (0.1 * 2 + EPS * 3) * torch.eye(2)
    assert torch.allclose((shrunk.chol @ shrunk.chol.T).float(), sigma)
    with pytest.raises(UserError, match="do not match"):
        router.scores(torch.zeros(2, 3))
    with pytest.raises(UserError, match="different widths"):
        FeatureRouter([a, FeatureStats(torch.zeros(3), torch.eye(3), 1)])


def test_pooled_covariance_beats_the_nearest_mean():
    """Means apart along a direction of tiny spread: the discriminant uses it, Euclidean distance does not."""
    cov = torch.diag(torch.tensor([4.0, 0.04]))                                 # shrunk: diag(3.8, 0.236)
    stats = [FeatureStats(torch.tensor([0.0, 0.0]), cov, 50), FeatureStats(torch.tensor([2.0, 1.0]), cov, 50)]
    f = torch.tensor([[2.0, 0.0], [0.0, 1.0]])                                  # task 0 (far along x), task 1
    assert FeatureRouter(stats).scores(f).argmax(0).tolist() == [0, 1]
    euclid = torch.stack([-((f - s.mean) ** 2).sum(1) for s in stats])
    assert euclid.argmax(0).tolist() == [1, 0]


def test_class_means_route_tasks_of_several_classes():
    """Two tasks of two classes each, both centred at 0: task-level Gaussians cannot tell them apart, the
    within-class discriminant over their classes does; the class tensors survive a form change and a save."""
    rows = {0: [(5.0, 0.0), (-5.0, 0.0)], 1: [(0.0, 5.0), (0.0, -5.0)]}       # task → its classes' centres
    gen = torch.Generator().manual_seed(0)
    stats = []
    for task, centres in rows.items():
        acc = FeatureAccumulator()
        for c, centre in enumerate(centres):
            acc.update(torch.tensor(centre) + 0.3 * torch.randn(40, 2, generator=gen), torch.full((40,), c))
        stats.append(acc.finish("full"))
    assert stats[0].class_means.shape == (2, 2) and stats[0].class_counts.tolist() == [40.0, 40.0]
    assert stats[0].class_labels.tolist() == [0.0, 1.0]
    assert torch.allclose(stats[0].class_means[0], torch.tensor([5.0, 0.0]), atol=0.2)
    f = torch.tensor([[4.5, 0.3], [-5.2, 0.1], [0.2, 4.8], [-0.3, -5.1]])
    assert FeatureRouter(stats).scores(f).argmax(0).tolist() == [0, 0, 1, 1]
    blind = [FeatureStats(s.mean, s.cov, s.count) for s in stats]              # the same rows, no labels
    assert FeatureRouter(blind).scores(f).argmax(0).tolist() != [0, 0, 1, 1]
    low = stats[0].reduce("diagonal")
    assert torch.equal(low.class_means, stats[0].class_means) and set(low.tensors()) == {
        "mean", "var", "class_means", "class_counts", "class_labels"}


def test_head_module_and_head_inputs():
    root = nn.Module()
    root.body = nn.Linear(3, 2)
    root.heads = nn.ModuleList([nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))])
    assert head_module(root, ["heads.0.0.weight", "heads.0.2.bias"]) is root.heads[0]
    assert head_module(root, ["heads.0.2.weight", "heads.0.2.bias"]) is root.heads[0][2]
    assert head_module(root, []) is None and head_module(root, ["weight"]) is None
    with HeadInputs(root.heads[0]) as rec:
        h = root.body(torch.ones(4, 3))
        root.heads[0](h[:1])
        root.heads[0](h[1:])
        assert torch.equal(rec.take(4), h.detach())
        with pytest.raises(UserError, match="saw 0 rows for 4 inputs"):
            rec.take(4)
    root.heads[0](h)                                                              # hook removed: nothing recorded
    assert rec.parts == []


class TwoTask(MultiTaskModule):
    """A graftable body (2 → 2, identity at θ_pre) and one head per task that ignores its input, equally
    confident on every input (task 0 says class 0, task 1 class 1): only the features tell the tasks apart."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2, bias=False)
        self.heads = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
        self.max_class_label = 2                                  # width of Avalanche's mixed-task output
        with torch.no_grad():
            self.body.weight.copy_(torch.eye(2))
            for k, h in enumerate(self.heads):
                h.weight.zero_()
                h.bias.copy_(torch.tensor([3.0, 0.0]) if k == 0 else torch.tensor([0.0, 3.0]))

    def graft_head_names(self, label):
        return [n for n, _ in self.named_parameters() if n.startswith("heads." if label is None else f"heads.{label}.")]

    def forward_single_task(self, x, task_label):
        return self.heads[int(task_label)](self.body(x))


def two_task_router() -> tuple[TwoTask, OwnerMap, TaskRouter]:
    """Task 0 owns body row 0 (scaled by 5), task 1 row 1 (scaled by 5): features in the tasks' own states
    differ from those at θ_pre (= x). Statistics at θ_pre: task 0's inputs around (2, 0), task 1's around (0, 2)."""
    model = TwoTask()
    owners = OwnerMap({"body.weight": model.body.weight})
    for task, row in (("0", 0), ("1", 1)):
        mask = torch.zeros(2, 2, dtype=torch.bool)
        mask[row] = True
        with torch.no_grad():
            model.body.weight[row, row] = 5.0
        owners.add_(model, task, Region.adopt({"body.weight": mask}),
                    head_names=model.graft_head_names(int(task)))
    owners.features = {"0": FeatureStats(torch.tensor([2.0, 0.0]), torch.eye(2), 8,
                                         class_means=torch.tensor([[2.0, 0.5], [2.0, -0.5]]),
                                         class_counts=torch.tensor([4.0, 4.0]),
                                         class_labels=torch.tensor([0.0, 1.0])),
                       "1": FeatureStats(torch.tensor([0.0, 2.0]), torch.eye(2), 8)}
    return model, owners, TaskRouter(graft_target(model), owners)


def test_feature_routing_picks_the_task_where_confidence_cannot():
    model, _, router = two_task_router()
    x = torch.tensor([[2.0, 0.0], [2.2, -0.3], [0.0, 2.0], [0.3, 1.8]])          # tasks 0, 0, 1, 1
    assert torch.equal(router.features(x), x)                                    # θ_pre: the identity body
    logits, chosen = router.infer(x, "features")
    assert chosen.tolist() == [0, 0, 1, 1]
    assert torch.equal(logits.argmax(-1), chosen)                               # each row: its task's head
    assert torch.equal(logits[2], model.heads[1](model.body(x[2])))             # ... in its task's state
    _, by_entropy = router.infer(x, "entropy")
    assert by_entropy.tolist() == [0, 0, 0, 0]                                  # a tie: always the first task
    router.close_()
    assert torch.equal(model.body.weight, torch.tensor([[5.0, 0.0], [0.0, 5.0]]))  # put back


def test_statistics_round_trip_and_missing(tmp_path):
    _, owners, _ = two_task_router()
    owners.save(tmp_path / "skills")
    assert json.loads((tmp_path / "skills" / "skills.json").read_text())["features"] == [8, 8]
    fresh = TwoTask()
    loaded = OwnerMap.load(tmp_path / "skills", fresh)
    for t in ("0", "1"):
        assert torch.equal(loaded.features[t].mean, owners.features[t].mean)
        assert torch.equal(loaded.features[t].cov, owners.features[t].cov)
        assert loaded.features[t].count == 8
    assert torch.equal(loaded.features["0"].class_means, owners.features["0"].class_means)
    assert loaded.features["1"].class_means is None                          # a task fitted without labels
    loaded.apply_(fresh)
    _, chosen = TaskRouter(graft_target(fresh), loaded).infer(torch.tensor([[2.0, 0.0], [0.0, 2.0]]), "features")
    assert chosen.tolist() == [0, 1]

    del owners.features["1"]                                                     # e.g. a model without a head module
    owners.save(tmp_path / "skills")
    loaded = OwnerMap.load(tmp_path / "skills", TwoTask())
    assert list(loaded.features) == ["0"]
    router = TaskRouter(graft_target(TwoTask()), loaded)
    router.check("entropy")
    with pytest.raises(UserError, match="task '1' has no feature statistics") as err:
        router.infer(torch.zeros(1, 2), "features")
    assert "\n" not in str(err.value)

    cfg = json.loads((tmp_path / "skills" / "skills.json").read_text())
    del cfg["features"]                                                          # skills saved before statistics
    (tmp_path / "skills" / "skills.json").write_text(json.dumps(cfg))
    assert OwnerMap.load(tmp_path / "skills", TwoTask()).features == {}
    cfg["features"] = [8, None]
    (tmp_path / "skills" / "skills.json").write_text(json.dumps(cfg))
    (tmp_path / "skills" / FEATURES_FILE).unlink()
    with pytest.raises(UserError, match="missing"):
        OwnerMap.load(tmp_path / "skills", TwoTask())


def test_cli_offers_every_rule():
    from cl_graft.cli.run import run

    option = next(p for p in run.params if p.name == "task_inference")
    assert tuple(option.type.choices) == TASK_INFERENCE


def test_rules_script_scores_feature_rules():
    from cl_graft.benchmarks.experiments.probes.task_inference_rules import evaluate_rules

    stats = [FeatureStats(torch.tensor([4.0, 0.0]), torch.eye(2), 8), FeatureStats(torch.tensor([0.0, 4.0]),
                                                                                    torch.eye(2), 8)]
    logits = [[torch.tensor([[3.0, 0.0], [0.0, 3.0]])] * 2, [torch.tensor([[0.0, 3.0]])] * 2]  # same under both
    features = [torch.tensor([[4.0, 0.0], [4.0, 0.5]]), torch.tensor([[0.2, 4.0]])]          # at θ_pre
    labels = [torch.tensor([0, 0]), torch.tensor([1])]
    res = evaluate_rules(["a", "b"], logits, labels, features, stats)
    assert res["features"]["task_id"] == [1.0, 1.0] and res["features: nearest mean"]["task_id"] == [1.0, 1.0]
    assert res["features"]["task_agnostic"] == [0.5, 1.0] == res["features"]["avalanche"]
    assert res["entropy"]["task_id"] == [1.0, 0.0]                              # ties go to the first task
    assert "features" not in evaluate_rules(["a", "b"], logits, labels)


def test_feature_statistics_count_in_each_tasks_bytes():
    """Each task's bytes: its region (a value + a gap-coded index per element), its head and its d + d² float32 (full)
    statistics, and its m class means and counts when it keeps them; the run's total adds them up (the cheaper
    owner form for the regions)."""
    _, owners, _ = two_task_router()
    per_task = owners.task_bytes()
    for task, patch, b in zip(owners.tasks, owners.patches, per_task):
        d = owners.features[task].mean.numel()
        means = owners.features[task].class_means
        m = 0 if means is None else means.shape[0]
        assert b["features"] == 4 * (d + d * d + m * d + 2 * m) and b["region"] == patch.bytes(extra=False)
        assert b["total"] == b["region"] + b["head"] + b["features"]
    total = owners.bytes()
    assert total["features"] == sum(b["features"] for b in per_task) > 0
    assert total["total"] == total["regions"] + total["heads"] + total["features"]
    del owners.features["1"]
    assert owners.task_bytes()[1]["features"] == 0
