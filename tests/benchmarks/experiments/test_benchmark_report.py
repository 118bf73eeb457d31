"""The benchmark report: serving figures on a tiny model; the reproduction tables from run artifacts."""
from __future__ import annotations

import json

import pytest

from cl_graft.artifacts import save_classifier
from cl_graft.files import read_json, write_json
from cl_graft.provenance import run_record

from helpers import SENTIMENT, results_json, strategy_json, tiny_bert

pytest.importorskip("avalanche")

from cl_graft.benchmarks.experiments import benchmarks_page as report
from cl_graft.benchmarks.experiments import report_tables as tables


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


def _fake_run(folder, seed, averages, chosen=None):
    """A ``cl-graft run`` results.json (as the checked loader reads it) with the given final average accuracy per
    strategy."""
    strategies = {}
    for name, avg in averages.items():
        info = {"tuning": {"chosen": chosen, "grid": [chosen, {"ewc_lambda": 1.0}], "dev_average": [0.7, 0.6]}} \
            if name == "ewc" and chosen else {}
        strategies[name] = strategy_json([avg, avg], forgetting=0.01, bytes=2_000_000, seconds=3.0, info=info)
    folder.mkdir(parents=True)
    write_json(folder / "results.json", results_json({**run_record(command="run", device="cpu"), "seed": seed,
                                                      "preset": "smoke", "k": 8}, ["a", "b"], strategies))
    return folder


def test_continual_summary_pairs_seeds_and_renders_verdicts(tmp_path):
    folders = [_fake_run(tmp_path / f"seed{s}", s, {"graft": g, "naive": n, "ewc": e, "lwf": w},
                         {"ewc_lambda": 100.0})
               for s, (g, n, e, w) in enumerate([(0.80, 0.70, 0.79, 0.78), (0.82, 0.71, 0.83, 0.785),
                                                  (0.78, 0.69, 0.77, 0.76)])]
    summary = tables.continual_summary(folders, root=tmp_path)
    naive, ewc = summary["rows"]["naive"], summary["rows"]["ewc"]
    assert naive["reference_minus"]["mean"] == pytest.approx(0.10) and naive["reference_minus"]["ahead"] == 1
    assert ewc["reference_minus"]["mean"] == pytest.approx(0.0033333, abs=1e-6)
    assert ewc["reference_minus"]["ahead"] == 0 and ewc["chosen"] == {"ewc_lambda": 100.0}
    assert summary["rows"]["graft"]["std"] == pytest.approx(0.02) and "reference_minus" not in summary["rows"]["graft"]
    assert summary["artifacts"] == ["seed0/results.json", "seed1/results.json", "seed2/results.json"]
    text = "\n".join(tables.continual_lines(summary))
    assert "| naive | – | 70.0 | 70.0 | 70.0 ± 1.0 |" in text and "graft ahead" in text and "not separable" in text
    assert "**ewc_lambda 100.0: 70.0**" in text                                 # the dev-chosen point in bold
    # graft − lwf: 2.0, 3.5, 2.0 points; t quantiles 4.30 (per comparison), 7.65 (Bonferroni, 3 comparisons, 2 df)
    lwf = summary["rows"]["lwf"]
    assert lwf["reference_minus"]["ahead"] == 1 and lwf["bonferroni"]["ahead"] == 0
    assert lwf["bonferroni"]["low"] == pytest.approx(0.025 - summary["t_bonferroni"] * 0.005)
    assert summary["comparisons"] == 3 and summary["t_bonferroni"] == pytest.approx(7.649, abs=1e-3)
    assert "| +2.5 | [+0.3, +4.7] | [-1.3, +6.3] | ahead per comparison only |" in text
    assert "| +10.0 | [+7.5, +12.5] | [+5.6, +14.4] | graft ahead |" in text   # naive: ahead after correction too
    assert "Bonferroni 95% (3 comparisons)" in text
    assert "1 − 0.05/6, 2 degrees of freedom: 7.65 instead of 4.30" in text
    _fake_run(tmp_path / "other", 3, {"graft": 0.8, "lwf": 0.7})
    with pytest.raises(ValueError, match="differ"):
        tables.continual_summary([folders[0], tmp_path / "other"], root=tmp_path)


def test_localization_summary_reads_every_size_and_method(tmp_path):
    def row(name, acc):
        return {"name": name, "accuracy": acc, "ece": 0.1, "agreement": 0.9}

    write_json(tmp_path / "a.json", {"config": {"git_revision": "abc"}, "quality": {"sst2": {"n_test": 10, "rows": [
        row("FT", 0.8), row("graft-0.0001", 0.7), row("topk-0.0001", 0.6), row("graft-0.001", 0.75)]}}})
    summary = tables.localization_summary([tmp_path / "a.json"], root=tmp_path)
    cells = summary["tasks"]["sst2"]["cells"]
    assert cells["graft-0.0001"]["accuracy"] == 0.7 and cells["topk-0.001"] is None
    text = "\n".join(tables.localization_lines(summary))
    assert "| sst2 (10) | 80.0 / 10.0 | 70.0 / 10.0 / 90.0 | 60.0 / 10.0 / 90.0 | 75.0 / 10.0 / 90.0 | – |" in text


def test_commands_made_relative_and_incomplete_records_marked():
    cmd = ("/path/to/clone/benchmarks/experiments/report.py --quick --data-dir /path/to/shared/data "
           "--out=/path/to/clone/B.md")
    assert tables.relative_command(cmd) == ("benchmarks/experiments/report.py --quick --data-dir ../shared/data "
                                            "--out=B.md", True)
    assert tables.relative_command("cl-graft run --out /path/x") == ("cl-graft run --out /path/x", False)
    assert tables.record_note({"command_line": "x", "device_name": "cpu", "git_revision": "abc"}) is None
    assert tables.record_note({"git_revision": "0aa345cf65"}) == ("run record incomplete: no command line or device "
                                                                   "name recorded; revision 0aa345c")
    assert tables.record_note({"command_line": "x", "device_name": "cpu", "git_revision": "unknown"}) == \
        "run record incomplete: revision unknown"
    assert tables.record_note({"argv": ["cl-graft", "x"], "device": "cpu", "git_revision": "abc1234567"}) == \
        "run record incomplete: no device name recorded; revision abc1234"             # the older form of a record
    assert tables.record_note({"command_line": "x", "device_name": "cpu", "git_revision": "abc1234567+dirty"}) == \
        "run record incomplete: revision abc1234+dirty (uncommitted changes)"


def test_incomplete_artifacts_finds_the_marked_records_a_page_names(tmp_path):
    from cl_graft.benchmarks.experiments.run_records import incomplete_artifacts

    whole = {"command_line": "x", "device_name": "cpu", "git_revision": "abc1234"}
    for folder in ("a_1", "a_2"):
        (tmp_path / folder).mkdir()
    write_json(tmp_path / "a_1" / "results.json", {"run": whole})
    write_json(tmp_path / "a_2" / "results.json", {"run": {**whole, "git_revision": "abc1234+dirty"}})
    write_json(tmp_path / "a_2" / "config.json", {**whole, "git_revision": "abc1234+dirty"})
    write_json(tmp_path / "b.json", {"config": {"git_revision": ["fd50936f"], "command_line": "y"}})
    write_json(tmp_path / "c.json", {"numbers": [1, 2]})                       # no record: nothing to mark
    write_json(tmp_path / "d.json", {"config": {"git_revision": ["abc"]}, "runs": [whole, whole]})   # parts: whole
    marked = incomplete_artifacts(["a_*/", "b.json", "c.json", "d.json", "missing/"], tmp_path)
    assert marked == {"a_2/": "run record incomplete: revision abc1234+dirty (uncommitted changes)",
                      "b.json": "run record incomplete: no device name recorded; revision fd50936"}


def _measured() -> dict:
    """The performance part of a report, made up."""
    return {"record": run_record(command="x", device="cpu"),
            "cost": {"finetune_step_s": 0.5, "n_batches=1": {"localize_s_per_batch": 0.45, "ratio": 0.9}},
            "serving": {"load_checkpoint_s": 1.0, "load_weights_only_s": 0.1, "tasks": {
                "1": {"serve_first_s": 1e-4, "serve_last_s": 1e-5, "bytes_per_skill": 9e4,
                      "owner_map_bytes_per_skill": 1e7, "percent_of_checkpoint": 0.1}}},
            "strategies": {"stream": "a,b", "preset": "smoke", "ratio": 1.2, "graft": {"wall_s": 12, "peak_rss_mb": 900},
                           "naive": {"wall_s": 10, "peak_rss_mb": 800}}}


def test_render_names_the_committed_artifacts():
    measured = _measured()                        # one record: its load average is read once, as a run's is
    text = report.render({**measured, "reproduction": report.reproduction()})
    assert "ratio 1.20" in text and "| localization, per step of 1 batches | 0.450 | 0.90 |" in text
    revision = measured["record"]["git_revision"][:7]                  # the timed run's, not today's default's
    assert (f"ratio 1.20. This ratio is of the run named above (git {revision}), not of today's default" in text
            and "is on [the speed page](benchmarks/results/speed/speed.md)" in text)
    assert report.UNTESTED_HERE in text.split("### Continual learning")[0]           # beside the sweep it qualifies
    assert report.CONDITIONS in text.split("## More results")[1].split("| page |")[0]   # said once, above the index
    assert (report.RESULTS.parent / "experiments" / "learned_region_power.sh").is_file()   # the plan it names
    assert "peak RSS 900 MB; naive 10 s, 800 MB (MB = 10^6 bytes)" in text
    load = measured["record"]["conditions"]["load_average_start"]
    assert f"load averages {' / '.join(f'{x:.1f}' for x in load)} at the start, not recorded at the end" in text
    old_layout = {**_measured(), "reproduction": report.reproduction()}
    old_layout["record"] = {**old_layout["record"], "load_average_start": [2, 1, 0.5], "load_average_end": [3, 2, 1]}
    del old_layout["record"]["conditions"]                                 # a report made before run conditions
    assert "load averages 2.0 / 1.0 / 0.5 at the start, 3.0 / 2.0 / 1.0 at the end" in report.render(old_layout)
    old = _measured()
    del old["record"]["byte_unit"]                                         # a report made when MB meant MiB
    assert "peak RSS 944 MB; naive 10 s, 839 MB" in report.render({**old, "reproduction": report.reproduction()})
    assert "Artifacts: `benchmarks/results/localization.json`, `benchmarks/results/localization_more.json`." in text
    assert "| sst2 (872) | 82.1 / 11.1 |" in text and "run record incomplete" not in text.split("## More results")[0]
    assert "Gaps and calibration counts: [`benchmarks/results/localization.md`]" in text
    assert "`benchmarks/results/region_sweep.json`" in text and "`benchmarks/results/distributed.json`" in text
    assert text.endswith("| [`reliability.md`](benchmarks/results/reliability.md) | the reliability probe: every "
                         "command and the Python API against bad input, foreign folders, interruption and tampered "
                         "state, its cases grouped by what they protect | `reliability.json` |\n")   # a complete record
    assert "| learned region vs top-\\|Δ\\| at four sizes, calibration |" in text         # cells escaped
    for page, _, _ in report.MORE_RESULTS:                                      # every listed page is committed
        assert (report.RESULTS / page).is_file() and f"[`{page}`](benchmarks/results/{page})" in text


def _digits_run(folder, seed, averages, *, stream, model, scenario, chosen=None, chance=None):
    """One ``cl-graft run`` invocation's results.json on a two-task digits stream: the given final average
    accuracy per strategy (every cell of its matrix), graft's tuning choice, the tasks' chance bands."""
    def entry(name, avg):
        return strategy_json([avg, avg], bytes=1000 * len(name), seconds=2.0,
                             info={"tuning": {"chosen": chosen}} if name == "graft" and chosen else {})

    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results_json(
        {"seed": seed, "command_line": "cl-graft run", "git_revision": "abc1234def+dirty", "device_name": "Test CPU",
         "stream": stream, "model": model, "preset": "smoke"}, ["t0", "t1"],
        {n: entry(n, a) for n, a in averages.items()}, scenario=scenario, chance=chance)))
    return folder


def _digits_benchmark(root, stream, model, scenario, peers, variants, **kwargs):
    """A ``digits.json`` benchmark summary (:func:`seeds_report.benchmark_summary`) of three seeds: ``peers`` in
    the main invocations, each ``graft[size]`` of ``variants`` in invocations of its own."""
    from cl_graft.benchmarks.experiments.seeds_report import benchmark_summary

    base = root / f"{stream}-{model}-{scenario}"
    kw = {"stream": stream, "model": model, "scenario": scenario}
    folders = {"main": [_digits_run(base / f"seed{s}", s, {n: v[s] for n, v in peers.items()}, **kw, **kwargs)
                        for s in range(3)]}
    for label, values in variants.items():
        folders[label] = [_digits_run(base / label / f"seed{s}", s, {"graft": values[s]}, **kw) for s in range(3)]
    return benchmark_summary(folders, root=root)


def test_the_digits_section_reads_digits_json(tmp_path, monkeypatch):
    graft = [0.90, 0.92, 0.91]
    split = _digits_benchmark(
        tmp_path, "split-digits", "mlp", "class",
        {"graft": graft, "naive": [0.20, 0.21, 0.19], "replay": [0.85, 0.86, 0.88],
         "cumulative": [0.99, 0.99, 0.98]},                       # the ceiling: higher, but never the best peer
        {"graft[0.01]": [0.80, 0.81, 0.79], "graft[auto]": graft, "graft[open]": [0.89, 0.93, 0.90]},
        chosen={"size": "auto"})
    permuted = _digits_benchmark(
        tmp_path, "permuted-digits:2", "mtmlp", "task",
        {"graft": graft, "naive": [0.10, 0.13, 0.11], "ewc": [0.50, 0.50, 0.50]},      # ewc at chance: flagged
        {"graft[0.1]": graft, "graft[auto]": [0.88, 0.90, 0.89]}, chosen={"size": 0.1},
        chance=[[0.45, 0.55]] * 2)
    folder = tmp_path / "benchmarks" / "results" / "digits"
    folder.mkdir(parents=True)
    write_json(folder / "digits.json", {"benchmarks": [split, permuted]})
    monkeypatch.chdir(tmp_path)                          # reproduction() reads benchmarks/results under it
    repro = report.reproduction()
    assert repro["continual"] is None and "region_size" not in repro
    best = [b["best"]["name"] for b in repro["digits"]["benchmarks"]]
    assert best == ["replay", "ewc"]
    text = report.render({**_measured(), "reproduction": repro})
    section = text.split("### Digits streams through `cl-graft run` (task- and class-incremental)\n")[1]
    section = section.split("## More results")[0]
    assert "Artifact: `benchmarks/results/digits/digits.json` (invocations: git abc1234+dirty on Test CPU); page: " \
           "[`benchmarks/results/digits/digits.md`](benchmarks/results/digits/digits.md)." in section
    rows = {line.split(" | ")[0]: line for line in section.splitlines() if line.startswith("| ")}
    # graft − replay: 5, 6, 3 points (Holm's third step, level 0.05; Bonferroni's 0.05/3 keeps 0); − cumulative: −9,
    # −7, −7 (level 0.025), counted apart from the peers
    assert rows["| split-digits, mlp (2 tasks, 3 seeds)"] == (
        "| split-digits, mlp (2 tasks, 3 seeds) | class-incremental (no task label) | 91.0 ± 1.0 (size auto) | "
        "5.0 KB | replay 86.3 ± 1.5 | 6.0 KB | +4.7 [+0.9, +8.5] | graft ahead | ahead on 2, behind on 0, not "
        "separable on 0 of 2 peers; cumulative (reference): graft behind; Bonferroni would change replay | graft[0.01] 80.0: +11.0 [+6.6, +15.4] default ahead; graft[open] 90.7: +0.3 "
        "[-3.8, +4.5] not separable |")
    row = rows["| permuted-digits:2, mtmlp (2 tasks, 3 seeds)"]
    assert "| task-incremental (task label given) | 91.0 ± 1.0 (size 0.1) |" in row
    assert "| ewc! 50.0 ± 0.0 | 3.0 KB | +41.0 [+38.5, +43.5] | graft ahead |" in row
    assert row.endswith("| graft[auto] 89.0: +2.0 [+0.0, +2.0] not separable |")     # the sign test: 3 seeds
    assert "graft[0.1]" not in row                                          # graft's own size: no comparison
    more = text.split("## More results (hand-written pages)")[1]
    assert "| [`digits/digits.md`](benchmarks/results/digits/digits.md) | every digits benchmark through " \
           "`cl-graft run` (split-digits, mlp class; permuted-digits:2, mtmlp task): " in more
    assert "| `digits/digits.json`, `digits/runs/` (21 invocations' `results.json`, each with its run record) |" \
        in more
    assert "region_size" not in text and "avalanche_digits" not in text


def test_continual_seeds_tunes_the_first_seed_and_reuses_its_choices(tmp_path, monkeypatch):
    from cl_graft.benchmarks.experiments import continual_seeds

    from helpers import InProcessCli, save_tiny_model, sentiment_rows, write_task

    started = InProcessCli()                                     # `python -m cl_graft.cli`, in this process
    monkeypatch.setattr(continual_seeds, "subprocess", started)
    save_tiny_model(tmp_path / "model")
    for name, flip in (("alpha", False), ("beta", True)):
        write_task(tmp_path / "data" / name, ["negative", "positive"],
                   {"train": sentiment_rows(64, 1 + flip, flip), "test": sentiment_rows(24, 3 + flip, flip)})
    summary = continual_seeds.main.main(["--data-dir", str(tmp_path / "data"), "--model", str(tmp_path / "model"),
                                    "--stream", "alpha,beta", "--strategies", "graft,ewc", "--seeds", "0,1",
                                    "--preset", "smoke", "--device", "cpu", "--out", str(tmp_path / "results")],
                                   standalone_mode=False)
    assert len(started.commands) == 2                                               # one run per seed
    runs = [read_json(tmp_path / "results" / f"seed{s}" / "results.json") for s in (0, 1)]
    files = read_json(tmp_path / "results" / "config.json")["files"]          # the script's run record lists ...
    assert {"summary.json", "seed1/results.json", "work/seed1/results.json", "work/seed1.log"} <= set(files)
    tuned, reused = (r["strategies"]["ewc"]["info"]["tuning"] for r in runs)
    assert len(tuned["dev_average"]) == 3 and reused["chosen"] == tuned["chosen"] and "seed 0" in reused["from"]
    assert "--tune" in runs[0]["run"]["command_line"] and "--settings-from" in runs[1]["run"]["command_line"]
    assert summary["seeds"] == [0, 1] and summary["rows"]["ewc"]["reference_minus"]["n"] == 2
    assert (tmp_path / "results" / "summary.md").read_text().count("| ewc |") == 2   # table + grid
    assert not (tmp_path / "results" / "seed0" / "graft").exists()                    # light files only
    assert list((tmp_path / "results" / "seed1" / "figures").glob("*.png"))



def test_the_reliability_page_marks_a_record_made_from_uncommitted_changes():
    from cl_graft.benchmarks.experiments.probes.reliability.probe import page_text

    record = {"command_line": "probe", "git_revision": "abc123456789", "device_name": "cpu"}
    assert "`probe` at abc123456789 on cpu:" in page_text([], 0, record)
    dirty = page_text([], 0, {**record, "git_revision": "abc123456789+dirty"})
    assert "at abc123456789 (run record incomplete: revision abc1234+dirty (uncommitted changes)) on cpu" in dirty
