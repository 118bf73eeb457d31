"""Calibration tools (reliability bins, temperature, head re-fit), OOD label mapping, and `cl-graft analyze`."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from cl_graft.analyze.calibration import (
    check_ood_pair,
    fit_temperature,
    head_features,
    refit_head,
    reliability,
)
from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.metrics import ece, softmax
from cl_graft.task import TaskSpec, ood_rows

from helpers import SENTIMENT, command_setup, tiny_bert


def test_reliability_bins_by_hand():
    probs = np.array([[0.95, 0.05], [0.15, 0.85], [0.45, 0.55], [0.62, 0.38], [0.0, 1.0]])
    labels = np.array([0, 0, 1, 1, 1])
    bins = reliability(probs, labels, n_bins=5)
    # confidences 0.95, 0.85, 0.55, 0.62, 1.0 → bins 4, 4, 2, 3, 4 (1.0 in the last); correct 1, 0, 1, 0, 1
    assert bins["count"] == [0, 0, 1, 1, 3]
    assert bins["accuracy"] == [None, None, 1.0, 0.0, pytest.approx(2 / 3)]
    assert bins["confidence"] == [None, None, 0.55, 0.62, pytest.approx((0.95 + 0.85 + 1.0) / 3)]
    by_hand = (1 * 0.45 + 1 * 0.62 + 3 * abs(2 / 3 - 2.8 / 3)) / 5
    assert bins["ece"] == pytest.approx(by_hand) == ece(probs, labels, n_bins=5)
    assert bins["edges"] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])


def test_temperature_recovers_the_generating_one():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4000, 3)) * 3
    labels = np.array([rng.choice(3, p=p) for p in softmax(logits / 2.5)])
    assert fit_temperature(logits, labels) == pytest.approx(2.5, rel=0.08)
    with pytest.raises(UserError, match="no rows"):
        fit_temperature(np.zeros((0, 2)), np.zeros(0, dtype=int))


def test_nli_label_mapping_for_qnli_to_mnli_and_snli():
    qnli = TaskSpec(name="qnli", labels=("entailment", "not_entailment"), pair=True)
    mnli = TaskSpec(name="mnli", labels=("entailment", "neutral", "contradiction"), pair=True)
    rows = [{"text_a": "a", "text_b": "b", "label": i} for i in (0, 1, 2, 2, 0)]
    assert [r["label"] for r in ood_rows(rows, mnli, qnli)] == [0, 1, 1, 0]         # neutral dropped
    check_ood_pair("qnli", "mnli")
    check_ood_pair("qnli", "snli")
    with pytest.raises(UserError, match="unknown OOD pair qnli -> sst2"):
        check_ood_pair("qnli", "sst2")
    topics = TaskSpec(name="agnews", labels=("World", "Sports", "Business", "Sci/Tech"))
    with pytest.raises(UserError, match="none of its labels"):
        ood_rows([{"text": "x", "label": 0}], topics, TaskSpec(name="sst2", labels=("negative", "positive")))


def test_refit_head_keeps_body_and_fits_the_features(toy_rows):
    model = tiny_bert()
    model.add_task(SENTIMENT)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    feats = head_features(model, toy_rows, "toy")
    assert feats.shape == (len(toy_rows), 32)
    logits = model(**model.encode(toy_rows), task="toy")
    torch.testing.assert_close(model.heads["toy"](feats), logits.detach())          # same rows, same order
    out = refit_head(model, toy_rows, "toy", l2=0.0)
    for n, p in out.named_parameters():
        assert torch.equal(p, before[n]) != n.startswith("heads."), n
    pred = out(**out.encode(toy_rows), task="toy").argmax(1)
    assert (pred == torch.tensor([r["label"] for r in toy_rows])).float().mean() >= 0.75
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.fixture(scope="module")
def cli_setup(tmp_path_factory):
    return command_setup(tmp_path_factory.mktemp("analyze"), ["sst2", "yelp", "imdb"])


def _run(args):
    return CliRunner().invoke(main, ["analyze", *args])


def test_cli_end_to_end(cli_setup):
    root, base = cli_setup
    out = root / "run"
    res = _run(["--task", "sst2", "--region-size", "0.01,0.05", "--alphas", "0,1", *base, "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads((out / "results.json").read_text())
    names = [r["name"] for r in result["rows"]]
    assert names == ["FT", "graft-0.01", "graft-0.05", "graft-retrain-0.05", "BitFit"]
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows["FT"]["ood"]) == {"imdb", "yelp"} and "refit" in rows["graft-0.01"]
    assert rows["FT"]["temperature"] > 0 and set(result["reliability"]) == set(names)
    curves = result["wise"]["curves"]
    assert list(curves) == ["WiSE-FT", "WiSE-graft-0.05"] and len(curves["WiSE-FT"]) == 2
    assert curves["WiSE-FT"][1]["score"] == pytest.approx(rows["FT"]["score"])         # α = 1 is θ_ft
    assert curves["WiSE-FT"][0]["score"] == pytest.approx(curves["WiSE-graft-0.05"][0]["score"])   # α = 0: θ_pre
    assert json.loads((out / "config.json").read_text())["command_line"].startswith("cl-graft analyze")
    for f in ("reliability.png", "wise.png", "table.md"):
        assert (out / f).stat().st_size > 0
    only = _run(["ood", "--task", "sst2", "--ood", "yelp", "--region-size", "0.01", "--finetuned",
                 str(out / "finetuned"), *base, "--out", str(root / "ood")])
    assert only.exit_code == 0, only.output
    again = json.loads((root / "ood" / "results.json").read_text())
    assert [r["name"] for r in again["rows"]] == ["FT", "graft-0.01"] and again["rows"][0]["score"] == rows["FT"]["score"]
    assert not (root / "ood" / "wise.png").exists() and "temperature" not in again["rows"][0]


@pytest.mark.parametrize("args, message", [
    (["--task", "sst2", "--ood", "snli"], "unknown OOD pair sst2 -> snli"),
    (["ood", "--task", "yelp"], "no OOD pairs known"),
    (["nonsense", "--task", "sst2"], "unknown section"),
    (["--task", "sst2", "--alphas", "0,2"], "[0, 1]"),
    (["--task", "sst2", "--wise-region-size", "0.5"], "not one of --region-size"),
])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(cli_setup, args, message):
    root, base = cli_setup
    out = root / "bad"
    res = _run([*args, *base, "--out", str(out)])
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and "Traceback" not in res.output and len(errors) == 1 and message in errors[0]
    assert not out.exists()
