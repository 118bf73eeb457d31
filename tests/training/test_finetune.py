import numpy as np
import pytest
import torch

from cl_graft.artifacts import load_classifier, save_classifier
from cl_graft.errors import UserError
from cl_graft.training.evaluate import evaluate, predict_logits
from cl_graft.training.finetune import FinetuneConfig, finetune_, trainable_names

from helpers import SENTIMENT, tiny_bert


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_finetune_learns_freezes_embeddings_and_is_seeded(tiny_model, toy_rows):
    before = _snapshot(tiny_model)
    cfg = FinetuneConfig(lr=0.2, batch_size=4, steps=120, eval_every=20, seed=3)
    result = finetune_(tiny_model, toy_rows, toy_rows, cfg, progress=False)
    metrics, _ = evaluate(tiny_model, toy_rows)
    assert metrics["accuracy"] >= 0.75 and result.best_dev == max(h["dev"] for h in result.history)
    after = _snapshot(tiny_model)
    moved = trainable_names(tiny_model)
    for n in tiny_model.embedding_parameter_names():
        assert torch.equal(before[n], after[n]), n
    if tiny_model.head_kind != "linear":                        # the LM head stays frozen for prompt heads
        for n in tiny_model.head_parameter_names():
            assert torch.equal(before[n], after[n]), n
    assert any(not torch.equal(before[n], after[n]) for n in moved)


def test_same_seed_same_weights(toy_rows):
    cfg = FinetuneConfig(lr=0.1, batch_size=4, steps=6, eval_every=3, seed=1)
    runs = []
    for _ in range(2):
        m = tiny_bert()
        m.add_task(SENTIMENT)
        finetune_(m, toy_rows, toy_rows, cfg, progress=False)
        runs.append(_snapshot(m))
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])


def test_save_load_round_trip(tiny_model, toy_rows, tmp_path):
    save_classifier(tiny_model, tmp_path)
    loaded = load_classifier(tmp_path)
    np.testing.assert_array_equal(predict_logits(tiny_model, toy_rows), predict_logits(loaded, toy_rows))


def test_bad_config():
    with pytest.raises(UserError, match="optimizer"):
        FinetuneConfig(optimizer="lbfgs")
    with pytest.raises(UserError, match="steps"):
        FinetuneConfig(steps=0)
