"""Records written before the region size had one name per quantity (``sparsity`` and graft's setting ``size`` for
the share, ``budget`` and graft's ``info["region_sizes"]`` for the count) load under today's names, ``region_size``
and ``region_elements`` (cl_graft.regions.names): committed run configs, tuning choices, results, skill map configs,
surgical results and saved region folders."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.io import CONFIG_NAME
from cl_graft.regions.names import current_names, current_setting_names, recorded_key, region_elements
from cl_graft.regions.region import Region
from cl_graft.skillmaps.experiment import SkillmapConfig
from cl_graft.skillmaps.results import load_skillmap
from cl_graft.surgical.report import format_surgical

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_a_committed_run_config_with_sparsity_loads():
    """The graft settings of a committed ``cl-graft run`` record (written with ``sparsity``/``budget``)."""
    record = json.loads((RESULTS / "retrain_ab/runs/split-digits-mlp-class-r0-s0/config.json").read_text())
    saved = record["strategy_settings"]["graft"]["localize"]
    assert "sparsity" in saved and "region_size" not in saved                    # written before the rename
    cfg = LocalizeConfig.from_json(saved)
    assert cfg.region_size == saved["sparsity"] == 0.05 and cfg.region_elements is saved["budget"] is None
    assert cfg.steps == saved["steps"] and cfg.normalize == saved["normalize"]
    again = cfg.to_json()
    assert "sparsity" not in again and again["region_size"] == 0.05 and LocalizeConfig.from_json(again) == cfg


def test_a_committed_skillmap_config_with_sparsity_loads():
    """``cl-graft multitask``'s committed record: its skill map config, localization settings included."""
    record = json.loads((RESULTS / "multitask_quick4/config.json").read_text())
    assert "sparsity" in record["skillmap"]["localize"]
    cfg = SkillmapConfig.from_json(record["skillmap"])
    assert cfg.localize.region_size == record["skillmap"]["localize"]["sparsity"]


def test_a_committed_skillmap_with_its_counts_as_region_size_loads():
    """skillmap.json written before the rename called each task's element count ``region_size``."""
    saved = json.loads((RESULTS / "multitask_quick4/skillmap.json").read_text())
    assert "region_size" in saved and "region_elements" not in saved
    sm = load_skillmap(RESULTS / "multitask_quick4")
    assert sm.region_elements.tolist() == saved["region_size"] and sm.numel == saved["numel"]
    assert sm.to_json()["region_elements"] == saved["region_size"] and "region_size" not in sm.to_json()


def test_committed_surgical_results_with_sparsity_make_the_same_anatomy_row():
    """A committed ``cl-graft surgical`` result (``anatomy.sparsity``) gives its committed table's anatomy row."""
    folder = RESULTS / "surgical_sst2"
    result = json.loads((folder / "results.json").read_text())
    assert "sparsity" in result["anatomy"]
    row = [line for line in format_surgical(result, task="sst2").splitlines() if line.startswith("| graft region")]
    committed = [line for line in (folder / "table.md").read_text().splitlines() if line.startswith("| graft region")]
    assert row == committed and row[0].startswith("| graft region 0.001 |")


def test_a_region_saved_with_old_names_loads_under_the_new_ones(tmp_path):
    shapes = {"a.layer.0.w": (3, 7), "a.layer.0.b": (5,)}
    region = Region(ops.random_mask(shapes, 4, seed=0), meta={"method": "topk", "region_size": 0.2,
                                                              "region_elements": 4})
    region.save(tmp_path / "r")
    path = tmp_path / "r" / CONFIG_NAME
    config = json.loads(path.read_text())
    config["meta"] = {"method": "topk", "sparsity": 0.2, "budget": 4}            # as written before the rename
    path.write_text(json.dumps(config))
    loaded = Region.load(tmp_path / "r")
    assert loaded == region and loaded.meta == {"method": "topk", "region_size": 0.2, "region_elements": 4}


def test_old_and_new_names_together_are_refused():
    assert current_names({"sparsity": 0.1, "steps": 2}) == {"region_size": 0.1, "steps": 2}
    with pytest.raises(UserError, match="both 'sparsity' and 'region_size' given"):
        LocalizeConfig.from_json({"sparsity": 0.1, "region_size": 0.2})


def test_committed_graft_settings_with_size_read_as_region_size():
    """A committed run (``--settings-from`` a tuned seed) recorded graft's setting and its choice as ``size``."""
    run = json.loads((RESULTS / "digits/runs/split-digits-cnn-task/seed1/results.json").read_text())["run"]
    graft, chosen = run["strategy_settings"]["graft"], run["settings_from"]["graft"]["chosen"]
    assert "size" in graft and "region_size" not in graft and chosen == {"size": 0.1}
    now = current_setting_names(graft)
    assert now["region_size"] == graft["size"] and now["region_size"]["tolerance"] == 0.02 and "size" not in now
    assert {k: v for k, v in now.items() if k != "region_size"} == {k: v for k, v in graft.items() if k != "size"}
    assert current_setting_names(chosen) == {"region_size": 0.1}
    assert recorded_key(graft, "region_size") == "size" and recorded_key(now, "region_size") == "region_size"
    assert recorded_key({}, "region_size") == "region_size"
    assert current_setting_names({"size": "auto", "size.tolerance": 0.01, "ewc_lambda": 5}) == \
        {"region_size": "auto", "region_size.tolerance": 0.01, "ewc_lambda": 5}
    with pytest.raises(UserError, match="both 'size.tolerance' and 'region_size.tolerance' given"):
        current_setting_names({"size.tolerance": 0.1, "region_size.tolerance": 0.2})


def test_committed_region_counts_in_region_sizes_read_as_region_elements():
    """graft's results written before the rename held each task's element count as ``info["region_sizes"]``."""
    info = json.loads((RESULTS / "text_size/text_refined/seed0/results.json").read_text())["strategies"]["graft"]["info"]
    assert "region_sizes" in info and "region_elements" not in info
    counts = region_elements(info)
    assert counts == info["region_sizes"] == [106467, 532339, 532339]
    assert [c / info["graftable"] for c in counts] == pytest.approx(info["region_density"], abs=1e-12)
    assert region_elements({"region_elements": [3, 4]}) == [3, 4] and region_elements({"bytes": 1}) is None
    with pytest.raises(UserError, match="both 'region_sizes' and 'region_elements' given"):
        region_elements({"region_sizes": [3], "region_elements": [3]})
