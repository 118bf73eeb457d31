"""Task inference by head-input feature statistics: the statistics on hand-made cases, routing on a constructed
multi-head model where output confidence cannot tell the tasks apart, storage with the skills, and the error
when a task has no statistics."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

avalanche = pytest.importorskip("avalanche")

from avalanche.models import MultiTaskModule
from cl_graft.strategies import OwnerMap, TaskRouter, graft_target
from cl_graft.strategies.routing import TASK_INFERENCE
from cl_graft.strategies.task_features import (
    EPS,
    FEATURES_FILE,
    FeatureAccumulator,
    FeatureStats,
    HeadInputs,
    head_module,
)

from cl_graft.errors import UserError
from cl_graft.regions.region import Region


def test_statistics_by_hand():
    f = torch.tensor([[0.0, 0.0], [2.0, 4.0], [4.0, 2.0], [2.0, 2.0]])          # mean (2, 2), var (2, 2)
    one, split = FeatureAccumulator(), FeatureAccumulator()
    one.update(f)
    split.update(f[:1])
    split.update(f[1:3])
    split.update(f[3:])
    for acc in (one, split):
        stats = acc.finish(shrink=0.0)
        assert stats.count == 4
        assert torch.allclose(stats.mean, torch.tensor([2.0, 2.0]))
        assert torch.allclose(stats.var, torch.tensor([2.0, 2.0]) + EPS * 3)
    shrunk = FeatureAccumulator()
    shrunk.update(torch.tensor([[0.0, 1.0], [2.0, 1.0]]))                         # var (1, 0): 2nd dim constant
    var = shrunk.finish(shrink=0.1).var
    assert torch.allclose(var, torch.tensor([0.9 + 0.05, 0.05]) + EPS * 1.5)     # no zero variance


def test_log_likelihood_by_hand():
    stats = FeatureStats(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 4.0]), 10)
    f = torch.tensor([[0.0, 1.0], [1.0, 3.0]])
    want = [-0.5 * ((0 + math.log(1)) + (0 + math.log(4))) / 2 - 0.5 * math.log(2 * math.pi),
            -0.5 * ((1 + math.log(1)) + (1 + math.log(4))) / 2 - 0.5 * math.log(2 * math.pi)]
    assert torch.allclose(stats.log_likelihood(f), torch.tensor(want))
    with pytest.raises(UserError, match="do not match"):
        stats.log_likelihood(torch.zeros(2, 3))


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
    """A graftable body (2 → 2, identity at θ_pre) and one head per task that ignores its input: every task is
    equally confident on every input, so only the features tell the tasks apart."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2, bias=False)
        self.heads = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
        with torch.no_grad():
            self.body.weight.copy_(torch.eye(2))
            for h in self.heads:
                h.weight.zero_()
                h.bias.copy_(torch.tensor([3.0, 0.0]))

    def graft_head_names(self, label):
        return [n for n, _ in self.named_parameters() if n.startswith("heads." if label is None else f"heads.{label}.")]

    def forward_single_task(self, x, task_label):
        return self.heads[int(task_label)](self.body(x))


def two_task_router() -> tuple[TwoTask, OwnerMap, TaskRouter]:
    """Task 0 owns body row 0 (doubled), task 1 row 1 (doubled); statistics of each task's features put
    task 0's inputs around (4, 0) and task 1's around (0, 4) in their own states."""
    model = TwoTask()
    owners = OwnerMap({"body.weight": model.body.weight})
    for task, row in (("0", 0), ("1", 1)):
        mask = torch.zeros(2, 2, dtype=torch.bool)
        mask[row] = True
        with torch.no_grad():
            model.body.weight[row, row] = 2.0
        owners.add_(model, task, Region.adopt({"body.weight": mask}),
                    head_names=model.graft_head_names(int(task)))
    owners.features = {"0": FeatureStats(torch.tensor([4.0, 0.0]), torch.ones(2), 8),
                       "1": FeatureStats(torch.tensor([0.0, 4.0]), torch.ones(2), 8)}
    return model, owners, TaskRouter(graft_target(model), owners)


def test_feature_routing_picks_the_task_where_confidence_cannot():
    model, _, router = two_task_router()
    x = torch.tensor([[2.0, 0.0], [2.2, -0.3], [0.0, 2.0], [0.3, 1.8]])          # tasks 0, 0, 1, 1
    _, chosen = router.infer(x, "features")
    assert chosen.tolist() == [0, 0, 1, 1]
    _, by_entropy = router.infer(x, "entropy")
    assert by_entropy.tolist() == [0, 0, 0, 0]                                  # a tie: always the first task
    router.close_()
    assert torch.equal(model.body.weight, torch.tensor([[2.0, 0.0], [0.0, 2.0]]))  # put back


def test_statistics_round_trip_and_missing(tmp_path):
    _, owners, _ = two_task_router()
    owners.save(tmp_path / "skills")
    assert json.loads((tmp_path / "skills" / "skills.json").read_text())["features"] == [8, 8]
    fresh = TwoTask()
    loaded = OwnerMap.load(tmp_path / "skills", fresh)
    for t in ("0", "1"):
        assert torch.equal(loaded.features[t].mean, owners.features[t].mean)
        assert torch.equal(loaded.features[t].var, owners.features[t].var)
        assert loaded.features[t].count == 8
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
    from cl_graft.benchmarks.experiments.task_inference_rules import evaluate_rules

    stats = [FeatureStats(torch.tensor([4.0, 0.0]), torch.ones(2), 8), FeatureStats(torch.tensor([0.0, 4.0]),
                                                                                     torch.ones(2), 8)]
    logits = [[torch.tensor([[3.0, 0.0], [0.0, 3.0]])] * 2, [torch.tensor([[0.0, 3.0]])] * 2]  # same under both
    features = [[torch.tensor([[4.0, 0.0], [4.0, 0.5]]), torch.tensor([[0.0, 0.0], [0.0, 0.0]])],
                [torch.tensor([[0.0, 0.0]]), torch.tensor([[0.2, 4.0]])]]
    labels = [torch.tensor([0, 0]), torch.tensor([1])]
    res = evaluate_rules(["a", "b"], logits, labels, features, stats)
    assert res["features"]["task_id"] == [1.0, 1.0] and res["features: nearest mean"]["task_id"] == [1.0, 1.0]
    assert res["features"]["task_agnostic"] == [0.5, 1.0] == res["features"]["avalanche"]
    assert res["entropy"]["task_id"] == [1.0, 0.0]                              # ties go to the first task
    assert "features" not in evaluate_rules(["a", "b"], logits, labels)
    per_class = [[stats[0], FeatureStats(torch.tensor([-4.0, 0.0]), torch.ones(2), 8)], [stats[1]]]
    res = evaluate_rules(["a", "b"], logits, labels, features, stats, per_class)
    assert res["features: per class"]["task_id"] == [1.0, 1.0]
