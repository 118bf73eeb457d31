"""The one digits loader: stream names, class ids per model kind, tuning rows apart from test rows, seeded models,
the scenarios a model can serve."""
from __future__ import annotations

import pytest
import torch
from cl_graft.benchmarks.digits import (
    DigitsStream,
    check_scenario,
    digits_arrays,
    digits_model,
    parse_digits_stream,
)

from cl_graft.errors import UserError

avalanche = pytest.importorskip("avalanche")


def _xy(exp) -> tuple[torch.Tensor, list[int]]:
    items = [exp.dataset[i] for i in range(len(exp.dataset))]
    return torch.stack([it[0] for it in items]), [int(it[1]) for it in items]


def test_stream_names():
    assert parse_digits_stream("split-digits") == 5 and parse_digits_stream(" permuted-digits:20 ") == 20
    assert parse_digits_stream("sst2") is None and parse_digits_stream("qnli,agnews") is None
    for bad in ("permuted-digits", "permuted-digits:0", "permuted-digits:x", "permuted-digits:255"):
        with pytest.raises(UserError, match="permuted-digits:N"):
            parse_digits_stream(bad)


def test_split_digits_labels_follow_the_model_kind():
    single = DigitsStream.make("split-digits", "mlp", seed=0)
    multi = DigitsStream.make("split-digits", "mtmlp", seed=0)
    assert len(single.tasks) == 5 and single.tasks == multi.tasks and single.tasks[0] == "digits14"
    digits = sorted(int(c) for t in single.tasks for c in t.removeprefix("digits"))
    assert digits == list(range(10))                                     # every digit in exactly one task
    for i, task in enumerate(single.tasks):
        x_single, y_single = _xy(single.benchmark.train_stream[i])
        x_multi, y_multi = _xy(multi.benchmark.train_stream[i])
        assert set(y_single) == {int(c) for c in task.removeprefix("digits")}   # the digits themselves
        assert set(y_multi) == {0, 1} and torch.equal(x_single, x_multi)       # per-task ids, same images


def test_permuted_digits_permute_the_same_images_and_tuning_never_sees_test_rows():
    stream = DigitsStream.make("permuted-digits:3", "mlp", seed=1)
    assert stream.tasks == ["perm0", "perm1", "perm2"]
    (x0, y0), (x1, y1) = _xy(stream.benchmark.test_stream[0]), _xy(stream.benchmark.test_stream[1])
    assert y0 == y1 and not torch.equal(x0, x1) and torch.equal(x0.sort(1).values, x1.sort(1).values)
    xtr, xte, _, _ = digits_arrays()
    ttr, tte, _, _ = digits_arrays(tune=True)
    assert len(ttr) + len(tte) == len(xtr)
    tuning_rows = {r.tobytes() for r in (*ttr, *tte)}
    assert tuning_rows <= {r.tobytes() for r in xtr} and not tuning_rows & {r.tobytes() for r in xte}
    tune = DigitsStream.make("permuted-digits:3", "mtmlp", seed=1, tune=True)
    assert len(tune.benchmark.test_stream[0].dataset) == len(tte)


def test_models_are_seeded_and_scenarios_checked():
    a, b = digits_model("cnn", 3), digits_model("cnn", 3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert digits_model("mlp", 0)(torch.zeros(2, 64)).shape == (2, 10)
    with pytest.raises(UserError, match="mlp, mtmlp, cnn"):
        digits_model("minilm", 0)
    check_scenario("mlp", "class")
    with pytest.raises(UserError, match="use --model mlp"):
        DigitsStream.make("split-digits", "mtmlp", seed=0, scenario="class")
    with pytest.raises(UserError, match="task, class"):
        check_scenario("mlp", "domain")
