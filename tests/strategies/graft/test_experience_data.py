"""Passes without gradients over an experience: rows of similar length batched together, outputs in the rows' order."""
from __future__ import annotations

import torch
from avalanche.models.utils import avalanche_forward
from cl_graft.benchmarks.streams import make_benchmark
from cl_graft.strategies.adapter import TaskAdapter
from cl_graft.strategies.eval_rows import collate, eval_batches
from cl_graft.strategies.graft.experience_data import ExperienceData
from torch import nn
from torch.utils.data import TensorDataset

from cl_graft.task import TaskRows

from helpers import SENTIMENT, tiny_bert

WORDS = "the plot was good and the acting was not bad at all but the end dragged on".split()


def _experience():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    rows = [{"text": " ".join(WORDS[:1 + (7 * i) % len(WORDS)]), "label": i % 2} for i in range(40)]
    bm = make_benchmark([TaskRows(SENTIMENT, train=rows, dev=rows[:5], test=rows[:5])], model)
    return TaskAdapter(model, ["toy"]).eval(), bm.train_stream[0].dataset


def test_rows_of_similar_length_share_a_batch_and_answers_keep_the_rows_order():
    model, dataset = _experience()
    idx = list(range(3, 40))                                                # not all rows, not from 0
    lengths = [len(dataset[i]["input_ids"]) for i in idx]
    seen = []
    for pos, batch in eval_batches(dataset, idx, size=8):
        width = [lengths[p] for p in pos.tolist()]
        assert int(batch[0][:, 1].sum(1).max()) == max(width)            # the batch is these rows
        seen.append(width)
    flat = [w for batch in seen for w in batch]
    assert flat == sorted(lengths) and len(seen) == 5                      # batched by length, every row once
    assert max(seen[0]) < max(seen[-1])                                     # short rows no longer pay for long ones

    data = ExperienceData(dataset, criterion=nn.CrossEntropyLoss())
    probs = data.probabilities(model, "train", limit=30, seed=1)             # (30, 2), a seeded sample of rows
    hits = data.correct(model, "train", limit=30, seed=1)
    labels = data.labels("train", limit=30, seed=1)
    _, chosen = data._selection("train", limit=30, seed=1)
    one = torch.cat([torch.softmax(avalanche_forward(model, collate(dataset, [i])[0], torch.tensor([0])).double(), -1)
                     for i in chosen])                                      # row by row: no padding at all
    assert torch.allclose(probs, one, atol=1e-5)
    assert torch.equal(hits, probs.argmax(-1) == labels)


def test_rows_without_a_length_keep_their_order():
    dataset = TensorDataset(torch.arange(10.0)[:, None], torch.zeros(10, dtype=torch.long))
    out = [(pos.tolist(), batch[0][:, 0].tolist()) for pos, batch in eval_batches(dataset, [9, 2, 5], size=2)]
    assert out == [([0, 1], [9.0, 2.0]), ([2], [5.0])]
