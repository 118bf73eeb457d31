"""Cumulative on a stream with more tasks than rows per batch: Avalanche 0.6's own Cumulative fails there
(``TaskBalancedDataLoader`` asserts ``batch_size >= tasks``); the entry's strategy draws plain batches instead."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.cli import main

ARGS = ["run", "--model", "mlp", "--preset", "smoke", "--quiet", "--stream", "permuted-digits:10", "--steps", "2"]


def test_avalanche_cumulative_fails_where_the_entry_runs(tmp_path):
    from avalanche.benchmarks.utils.data_loader import TaskBalancedDataLoader

    with pytest.raises(AssertionError):                     # Avalanche's loader: fewer rows per batch than tasks
        TaskBalancedDataLoader(_union(10), batch_size=8)
    args = [*ARGS, "--strategies", "cumulative", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args)                  # the smoke preset's batch: 8 rows, 10 tasks
    assert result.exit_code == 0, result.output
    saved = json.loads(Path(tmp_path, "run", "results.json").read_text())
    final = saved["strategies"]["cumulative"]["matrix"][-1]
    assert len(final) == 10 and not any(math.isnan(v) for v in final)    # every task evaluated at the end


def _union(tasks: int):
    """The training rows of the first ``tasks`` experiences of a permuted digits stream, one Avalanche dataset
    (what Cumulative trains on after them)."""
    from cl_graft.benchmarks.digits import DigitsStream

    train = DigitsStream.make(f"permuted-digits:{tasks}", "mlp", seed=0).benchmark.train_stream
    data = train[0].dataset
    for exp in list(train)[1:]:
        data = data.concat(exp.dataset)
    return data
