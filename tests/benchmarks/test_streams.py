"""Task names → Avalanche benchmark: validation, task labels, tokenised collate, rows back out."""
from __future__ import annotations


import pytest
import torch
from cl_graft.benchmarks.streams import TextCollate, experience_rows, make_benchmark, parse_stream

from cl_graft.errors import UserError
from cl_graft.task import TaskRows

from helpers import PAIR, SENTIMENT, tiny_bert

SINGLE = [{"text": "it was great fun", "label": 1}, {"text": "bad", "label": 0},
          {"text": "a dull plot", "label": 0}]
PAIRS = [{"text_a": "is this a question", "text_b": "yes", "label": 0},
         {"text_a": "no", "text_b": "maybe", "label": 1}]


def test_parse_stream():
    assert parse_stream("qnli, agnews,sst2") == ["qnli", "agnews", "sst2"]
    assert parse_stream(["sst2"]) == ["sst2"]
    for text, message in [("", "empty"), (" , ", "empty"), ("sst2,,cr", "empty item"), ("sst2,", "empty item"),
                          ("sst2,sst2", "twice"), ("sst2,nope", "unknown task")]:
        with pytest.raises(UserError, match=message):
            parse_stream(text)


def test_benchmark_has_one_task_labelled_experience_per_task():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    model.add_task(PAIR)
    bm = make_benchmark([TaskRows(SENTIMENT, train=SINGLE, dev=SINGLE[:1], test=SINGLE[:2]),
                         TaskRows(PAIR, train=PAIRS, dev=PAIRS, test=PAIRS)], model)
    assert [e.task_labels for e in bm.train_stream] == [[0], [1]]
    assert [len(e.dataset) for e in bm.test_stream] == [2, 2] and len(bm.valid_stream) == 2
    assert set(bm.train_stream[0].classes_in_this_experience) == {0, 1}
    rows = experience_rows(bm.train_stream[1].dataset)
    assert [r["text_a"] for r in rows] == ["is this a question", "no"] and rows[0]["targets_task_labels"] == 1
    x, y, t = bm.train_stream[0].dataset.collate_fn(experience_rows(bm.train_stream[0].dataset))
    enc = model.encode(SINGLE, "toy")
    width = enc["input_ids"].shape[1]
    assert x.shape == (3, 2, model.max_length) and not x[:, 1, width:].any()      # padded to the model's width
    assert torch.equal(x[:, 0, :width], enc["input_ids"]) and torch.equal(x[:, 1, :width], enc["attention_mask"])
    assert y.tolist() == [1, 0, 0] and t.tolist() == [0, 0, 0]


def test_collate_pads_every_batch_to_one_width():
    collate = TextCollate(pad_id=7, width=4)
    x, y, t = collate([{"input_ids": [1, 2, 3], "label": 1, "targets_task_labels": 4},
                       {"input_ids": [5], "label": 0, "targets_task_labels": 4}])
    assert x[:, 0].tolist() == [[1, 2, 3, 7], [5, 7, 7, 7]] and x[:, 1].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert y.tolist() == [1, 0] and t.tolist() == [4, 4]
    other, _, _ = collate([{"input_ids": [9], "label": 0, "targets_task_labels": 0}])
    assert torch.cat([x, other]).shape == (3, 2, 4)                # batches of two loaders concatenate


def test_bad_streams():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    with pytest.raises(UserError, match="empty"):
        make_benchmark([], model)
    with pytest.raises(UserError, match="no head for task 'toypair'"):
        make_benchmark([TaskRows(PAIR, train=PAIRS, dev=[], test=PAIRS)], model)
    with pytest.raises(UserError, match="no test rows"):
        make_benchmark([TaskRows(SENTIMENT, train=SINGLE, dev=[], test=[])], model)


def test_importing_benchmarks_does_not_import_avalanche(fresh_imports):
    assert "avalanche" not in fresh_imports["cl_graft.benchmarks.streams"]   # after benchmarks and strategies too
