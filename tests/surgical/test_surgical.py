"""FIM layer scores (batched per-row gradients), surgical fine-tuning, the fim-layers region method, and
`cl-graft surgical` end to end on a tiny saved BERT."""
from __future__ import annotations

import json
import types

import pytest
import torch
from click.testing import CliRunner

from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.regions import fisher as fisher_layers
from cl_graft.regions.fisher import fisher_sample, fisher_sums, layer_fisher, rank_agreement
from cl_graft.regions.learned import LocalizeConfig
from cl_graft.regions.methods import find_region
from cl_graft.regions.region import graftable_names, layer_index
from cl_graft.surgical.finetune import (
    check_layers,
    layer_names,
    random_layers,
    surgical_finetune,
    trained_count,
)
from cl_graft.training.finetune import FinetuneConfig

from helpers import SENTIMENT, command_setup, tiny_bert

ROWS = [{"text": t, "label": i % 2} for i, t in enumerate(
    ["it was great fun", "bad and boring plot terrible", "a good movie", "the film is wonderful and great fun",
     "dull", "is this a question ? yes no maybe"])]


def _loop_fisher(model, rows):
    """One backward per row: the reference the batched per-row gradients must match."""
    params = dict(model.named_parameters())
    names = graftable_names(params.items())
    ref = {n: torch.zeros_like(params[n]) for n in names}
    for r in rows:
        log_p = torch.log_softmax(model(**model.encode([r])), -1)[0, r["label"]]
        for n, g in zip(names, torch.autograd.grad(log_p, [params[n] for n in names]), strict=True):
            ref[n] += g.square() / len(rows)
    return ref


def test_batched_fisher_matches_one_backward_per_row(tiny_model):
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    modes = [m.training for m in tiny_model.modules()]
    got = fisher_sums(tiny_model, ROWS, batch_size=4)
    ref = {n: float(f.sum()) for n, f in _loop_fisher(tiny_model, ROWS).items()}
    assert list(got) == list(ref)
    scale = max(ref.values())
    for n, r in ref.items():
        assert got[n] == pytest.approx(r, rel=1e-4, abs=1e-6 * scale), n
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())
    assert modes == [m.training for m in tiny_model.modules()]


def test_layer_scores_on_a_hand_made_fisher(monkeypatch):
    """Known per-tensor Fisher sums → shares per layer and per group, per-element means, ranking."""
    prefix = "backbone.encoder.layer"
    fake = {f"{prefix}.0.attention.self.query.weight": 4.0,           # layer 0: 4 elements, sum 4
            f"{prefix}.0.output.LayerNorm.weight": 4.0,                #          + 4 elements, sum 4
            f"{prefix}.1.intermediate.dense.weight": 24.0,             # layer 1: 4 elements, sum 24
            f"{prefix}.1.attention.output.dense.bias": 4.0,            #          + 2 elements, sum 4
            f"{prefix}.2.output.dense.weight": 2.0}                    # layer 2: 4 elements, sum 2
    sizes = [4, 4, 4, 2, 4]
    model = types.SimpleNamespace(named_parameters=lambda: [(n, torch.zeros(k)) for n, k in zip(fake, sizes)])
    monkeypatch.setattr(fisher_layers, "fisher_sums", lambda *a, **k: fake)
    lf = layer_fisher(model, ROWS)
    assert lf.layers == [0, 1, 2]
    assert lf.scores == pytest.approx([8 / 38, 28 / 38, 2 / 38])
    assert lf.per_element == pytest.approx([1.0, 28 / 6, 0.5])
    assert lf.groups["attention"] == pytest.approx([4 / 38, 4 / 38, 0])
    assert lf.groups["feed-forward"] == pytest.approx([0, 24 / 38, 2 / 38])
    assert lf.groups["layernorm"] == pytest.approx([4 / 38, 0, 0])
    assert lf.ranking() == [1, 0, 2] and lf.top(2) == [0, 1]
    with pytest.raises(UserError, match="3"):
        lf.top(4)
    flipped = fisher_layers.LayerFisher([0, 1, 2], [0.2, 0.1, 0.7], [0] * 3, {}, 6)
    agree = rank_agreement(lf, flipped, 1)
    assert agree["top1_overlap"] == 0.0 and agree["spearman"] == pytest.approx(-1.0)      # ranks (1, 0, 2) vs (1, 2, 0)
    assert rank_agreement(lf, lf, 2) == {"spearman": pytest.approx(1.0), "top2_overlap": 1.0}


def test_empty_fisher_sample_is_refused():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    with pytest.raises(UserError, match="empty"):
        fisher_sums(model, [])
    with pytest.raises(UserError, match="empty"):
        fisher_sample([], 10, 0)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_surgical_finetune_moves_only_the_chosen_layer(tiny_model, toy_rows, optimizer):
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    cfg = FinetuneConfig(optimizer=optimizer, lr=0.2 if optimizer == "sgd" else 0.01, batch_size=4, steps=20,
                         eval_every=10, weight_decay=0.1, seed=0)
    out, _ = surgical_finetune(tiny_model, [1], toy_rows, toy_rows, cfg, progress=False)
    after = {n: p.detach() for n, p in out.named_parameters()}
    assert list(after) == list(before)
    heads = set(tiny_model.head_parameter_names()) if tiny_model.head_kind == "linear" else set()
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    assert moved and all(layer_index(n) == 1 or n in heads for n in moved), moved
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())     # input untouched


def test_layer_choices_are_checked():
    model = tiny_bert()
    for bad in ([2], [], [0, 0]):
        with pytest.raises(UserError, match="layers"):
            check_layers(model, bad)
    with pytest.raises(UserError, match="layers"):
        random_layers(model, 3, seed=0)
    assert random_layers(model, 2, seed=0) == [0, 1]
    params = dict(model.named_parameters())
    assert trained_count(model, [0]) == sum(params[n].numel() for n in layer_names(model)[0])
    assert all(layer_index(n) == 0 for n in layer_names(model)[0])


def test_fim_layers_region_fills_top_layers_first(toy_rows):
    pre = tiny_bert()
    pre.add_task(SENTIMENT)
    ft = tiny_bert()
    ft.add_task(SENTIMENT)
    with torch.no_grad():
        for p in ft.parameters():
            p.add_(0.01 * torch.randn_like(p))
    numel = trained_count(pre, [0, 1])
    cfg = LocalizeConfig(region_size=0.6, seed=0, n_batches=1, batch_size=8)
    region = find_region("fim-layers", pre, ft, toy_rows, [], cfg, progress=False).region
    ranking = region.meta["fim_ranking"]
    per_layer = {i: sum(int(m.sum()) for n, m in region.masks.items() if layer_index(n) == i) for i in (0, 1)}
    full = {i: sum(m.numel() for n, m in region.masks.items() if layer_index(n) == i) for i in (0, 1)}
    assert region.size == int(0.6 * numel)
    assert per_layer[ranking[0]] == full[ranking[0]] and 0 < per_layer[ranking[1]] < full[ranking[1]]
    with pytest.raises(UserError, match="empty"):
        find_region("fim-layers", pre, ft, [], [], cfg, progress=False)


@pytest.fixture(scope="module")
def cli_setup(tmp_path_factory):
    return command_setup(tmp_path_factory.mktemp("surg"), ["toy"])


def _run(args):
    return CliRunner().invoke(main, ["surgical", *args])


def test_cli_end_to_end(cli_setup):
    root, base = cli_setup
    out = root / "run"
    res = _run(["--task", "toy", "--top-layers", "1,2", "--random-layers", "1", "--fisher-rows", "20",
                "--anatomy-region-size", "0.01", *base, "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in result["rows"]] == ["FT", "FIM top-1", "FIM top-2", "random-1", "graft ~top-1",
                                                   "graft ~top-2"]
    rows = {r["name"]: r for r in result["rows"]}
    assert rows["FIM top-2"]["trained"] == 2 * rows["FIM top-1"]["trained"] >= rows["graft ~top-2"]["trained"] > 0
    assert list(result["fim"]) == ["start", "pre_ft_head", "middle", "end"] and sum(result["fim"]["start"]["scores"]) == \
        pytest.approx(1.0)
    assert len(result["stability"]) == 6 and "start-end" in result["stability"]
    config = json.loads((out / "config.json").read_text())
    assert config["command_line"].startswith("cl-graft surgical") and config["git_revision"] and config["torch"]
    assert (out / "fim_layers.png").stat().st_size > 0 and (out / "fim_groups.png").stat().st_size > 0
    assert "FIM top-2" in (out / "table.md").read_text()
    no_mid = _run(["--task", "toy", "--top-layers", "1", "--random-layers", "", "--no-graft", "--no-stability",
                   "--fisher-rows", "20", "--anatomy-region-size", "0.01", "--finetuned", str(out / "finetuned"),
                   *base, "--out", str(root / "again")])
    assert no_mid.exit_code == 0, no_mid.output
    again = json.loads((root / "again" / "results.json").read_text())
    assert list(again["fim"]) == ["start", "pre_ft_head", "end"] and "start-end" in again["stability"]
    assert again["rows"][0]["accuracy"] == rows["FT"]["accuracy"]            # the saved fine-tune is reused


@pytest.mark.parametrize("args, message", [
    (["--top-layers", "3"], "outside the model's 1..2 layers"),
    (["--top-layers", "0,1"], "outside"),
    (["--top-layers", "a"], "integers"),
    (["--random-layers", "5"], "outside"),
    (["--fisher-rows", "0"], "empty"),
])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(cli_setup, args, message):
    root, base = cli_setup
    out = root / "bad"
    res = _run(["--task", "toy", *args, *base, "--out", str(out)])
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and "Traceback" not in res.output and len(errors) == 1 and message in errors[0]
    assert not out.exists()
