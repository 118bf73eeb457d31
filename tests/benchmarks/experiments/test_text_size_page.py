"""The text stream's size page (benchmarks/experiments/text_size_page.py) on synthetic results."""
from __future__ import annotations

from cl_graft.benchmarks.experiments.text_size_page import page_text

TASKS = ["qnli", "sst2"]


def _run(seed: int, graft: list[float], single: list[float], *, naive: bool = False) -> dict:
    sizing = [{"share": 0.01 * (i + 1), "cap_share": 0.2, "below_cap": True, "loss": 0.01, "bound": 0.019,
               "temperature": 1.5, "free": 0.9, "search_seconds": 3.0} for i in range(len(TASKS))]
    record = {"seed": seed, "command_line": f"cl-graft run --seed {seed}", "git_revision": "abc",
              "device_name": "cpu", "torch": "2"}
    strategies = {"graft": {"summary": {"final": graft, "average": sum(graft) / 2, "forgetting": 0.0},
                            "info": {"sizing": sizing, "task_bytes": [{"total": 2 * 2 ** 20}] * 2}, "bytes": 4 * 2 ** 20,
                            "seconds": 120.0},
                  "single": {"summary": {"final": single, "average": sum(single) / 2}}}
    if naive:
        strategies["naive"] = {"summary": {"average": 0.5}, "seconds": 100.0}
    return {"run": record, "tasks": TASKS, "strategies": strategies}


def test_page_reports_sizes_bytes_and_graft_against_single():
    runs = [_run(0, [0.8, 0.9], [0.8, 0.8], naive=True), _run(1, [0.7, 0.9], [0.8, 0.8])]
    text = page_text(runs, [r["strategies"]["single"] for r in runs])
    assert "| qnli | 1.00 | 20.0 | yes | +1.0 (1.9) | 1.50 | 90.0 | 3 | 2.00 | 80.0 | 80.0 |" in text
    assert "graft / naive wall time 1.20" in text and "cl-graft run --seed 1" in text
    assert "keeps 103.1% of single-task fine-tuning on average (106.2%, 100.0%)" in text
    assert "median size chosen 1.50%" in text and "largest 2.00%" in text
    assert "paired by seed: +2.5 points" in text
