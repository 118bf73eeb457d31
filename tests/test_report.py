"""The benchmark report: serving figures on a tiny model, the continual table from the committed artifacts."""
from __future__ import annotations

import pytest

from cl_graft.artifacts import save_classifier
from cl_graft.provenance import run_record

from conftest import SENTIMENT, tiny_bert

pytest.importorskip("avalanche")

from cl_graft.benchmarks.experiments import report


def test_serving_and_storage_on_a_tiny_model(tmp_path):
    model = tiny_bert()
    model.add_task(SENTIMENT)
    save_classifier(model, tmp_path / "ckpt")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = report.measure_serving(model, tmp_path / "ckpt", [1, 3], seed=0)
    assert set(out["tasks"]) == {"1", "3"} and out["load_checkpoint_s"] > 0
    for row in out["tasks"].values():
        assert row["serve_first_s"] >= 0 and 0 < row["bytes_per_skill"]
    assert all(p.equal(before[n]) for n, p in model.named_parameters())      # served and put back


def test_continual_table_and_render_from_committed_artifacts():
    table = report.continual_table()
    rows = table["rows"]
    assert {"graft (5%)", "graft (1%)", "naive", "lwf", "replay"} <= set(rows)
    lwf = rows["lwf"]["graft_minus"]
    assert lwf["n"] == 3 and lwf["low"] <= lwf["mean"] <= lwf["high"]
    fake = {"record": run_record(command="x", device="cpu"),
            "cost": {"finetune_step_s": 0.5, "n_batches=1": {"localize_s_per_batch": 0.45, "ratio": 0.9}},
            "serving": {"load_checkpoint_s": 1.0, "load_weights_only_s": 0.1, "tasks": {
                "1": {"serve_first_s": 1e-4, "serve_last_s": 1e-5, "bytes_per_skill": 9e4,
                      "owner_map_bytes_per_skill": 1e7, "percent_of_checkpoint": 0.1}}},
            "strategies": {"stream": "a,b", "preset": "smoke", "ratio": 1.2, "graft": {"wall_s": 12, "peak_rss_mb": 900},
                           "naive": {"wall_s": 10, "peak_rss_mb": 800}},
            "continual": table}
    text = report.render(fake)
    assert "| lwf |" in text and "95% interval" in text and "ratio 1.20" in text
    assert "| localization, per step of 1 batches | 0.450 | 0.90 |" in text
    assert "torchrun" not in text                                          # no scaling run given: no table
    scaling = {"config": {**run_record(command="x", device="cpu"), "load_average": [1.0, 1.0, 1.0]},
               "artifact": "benchmarks/results/distributed.json",
               "rows": [{"workload": "finetune", "processes": 2, "threads_per_process": 1, "seconds_per_step": 0.5,
                         "examples_per_second": 32.0, "speedup_vs_first": 1.9}]}
    text = report.render({**fake, "distributed": scaling})
    assert "| finetune | 2 × 1 | 0.50 | 32.0 | 1.90 |" in text and "`benchmarks/results/distributed.json`" in text
