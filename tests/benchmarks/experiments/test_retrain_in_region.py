"""The retraining probe's pages (benchmarks/experiments/probes/retrain_in_region.py); its regions and grafts are
find_region("topk") and graft_model, tested with the rest of cl_graft."""
from __future__ import annotations

from cl_graft.benchmarks.experiments.probes.retrain_in_region import page


def test_page_reports_each_cell_and_the_mean_gain():
    result = {"steps": 40, "config": {"command_line": "python -m x", "git_revision": "abc"},
              "tasks": {"sst2": {"ft": 0.82, "rows": [{"share": 0.002, "graft": 0.78, "retrained": 0.81, "seconds": 43.0},
                                                      {"share": 0.01, "graft": 0.80, "retrained": 0.80, "seconds": 44.0}]}}}
    text = page(result)
    assert "| sst2 | 82.0 | 0.2 | 78.0 | 81.0 | +3.0 | 43 |" in text and "after 40 more steps" in text
    assert "Mean gain over the 2 cells: +1.5 points" in text and "git abc" in text


def _seed(seed: int, graft: float, retrained: float) -> dict:
    return {"steps": 40, "config": {"seed": seed, "command_line": f"python -m x --seed {seed}", "git_revision": "abcdef0"},
            "tasks": {t: {"ft": 0.9, "rows": [{"share": 0.01, "graft": graft, "retrained": retrained, "seconds": 1.0}]}
                      for t in ("a", "b")}}


def test_seeds_page_gives_the_gain_with_its_interval_over_seeds(tmp_path):
    import json

    from cl_graft.benchmarks.experiments.probes.retrain_in_region import main, seeds_page
    from click.testing import CliRunner

    results = [_seed(0, 0.80, 0.82), _seed(1, 0.80, 0.83), _seed(2, 0.80, 0.84)]
    text = seeds_page(results)
    assert "| 1.0 | 90.0 | 80.0 | 83.0 | +3.0 [+0.5, +5.5] |" in text               # t(2) = 4.303, sd 1
    assert "| all | 90.0 | 80.0 | 83.0 |" in text and "--seed 2` (git abcdef0)" in text
    files = []
    for r in results:
        files.append(tmp_path / f"s{r['config']['seed']}.json")
        files[-1].write_text(json.dumps(r))
    ok = CliRunner().invoke(main, ["--combine", ",".join(map(str, files)), "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "o" / "retrain_seeds.md").read_text() == text
    one = CliRunner().invoke(main, ["--combine", str(files[0]), "--out", str(tmp_path / "p")])
    assert one.exit_code == 2 and "at least two seeds" in one.output and not (tmp_path / "p").exists()
