"""The probe tables of ``benchmarks/results/class_text/README.md`` are their committed artifacts' figures: each
table row is rebuilt from the probe's JSON and must appear in the page as written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "class_text"


def _page() -> str:
    return (FOLDER / "README.md").read_text()


def _art(rel: str) -> dict:
    return json.loads((FOLDER / rel).read_text())


def _pct(share: float, digits: int = 1) -> str:
    return f"{100 * share:.{digits}f}"


def within_rows() -> list[str]:
    rules = _art("within_experience_b77/within_experience.json")["rules"]
    names = {"grafted model": "the experience's grafted model (graft's routed answer)",
             "θ_pre head": "RanPAC's head over θ_pre's features, every training row (graft's router head)",
             "head on the grafted model's features": "a RanPAC head per experience over its grafted model's own "
                                                     "features"}
    return [f"| {names[n]} | {_pct(r['dev'])}% | {_pct(r['test'])}% |" for n, r in rules.items()]


def first_session_rows() -> list[str]:
    encoders = _art("first_session_b77/first_session.json")["encoders"]
    names = {"θ_pre": "θ_pre (graft's router)", "first task's grafted model": "the first task's grafted model"}
    out = []
    for n, e in encoders.items():
        dev, test = e["dev"][f"{e['ridge']:g}"], e["test"]
        out.append(f"| {names[n]} | {e['ridge']:g} | {_pct(dev['routed'])}% | {_pct(test['routed'])}% "
                   f"({_pct(test['routed_later'])}%) | {_pct(test['head'])}% ({_pct(test['head_later'])}%) |")
    return out


def combined_rows() -> list[str]:
    b, c = (_art(f"combined_answer_{s}/combined_answer.json")["rules"] for s in ("b77", "clinc150"))
    best = {(run, w): max(r[f"{w}_accuracy"] for r in rules.values()) for run, rules in (("b", b), ("c", c))
            for w in ("dev", "test")}

    def acc(run: str, rules: dict, name: str, which: str) -> str:
        text = _pct(rules[name][f"{which}_accuracy"], 2)
        return f"**{text}**" if rules[name][f"{which}_accuracy"] == best[(run, which)] else text

    out = []
    for name in ("head", "routed", "combined"):
        label = name
        if name == "combined":
            assert (b[name]["tau"], b[name]["k"]) == (c[name]["tau"], c[name]["k"])
            label = f"combined (τ {b[name]['tau']:g}, k {b[name]['k']} on both)"
        assert b[name]["passes_per_row"] == c[name]["passes_per_row"]
        out.append(f"| {label} | {acc('b', b, name, 'dev')} | {acc('b', b, name, 'test')} | "
                   f"{_pct(b[name]['test_own_experience'], 2)} | {acc('c', c, name, 'dev')} | "
                   f"{acc('c', c, name, 'test')} | {_pct(c[name]['test_own_experience'], 2)} | "
                   f"{b[name]['passes_per_row']} | {b[name]['ms_per_row']:.1f} / {c[name]['ms_per_row']:.1f} |")
    return out


@pytest.mark.parametrize("rows", [within_rows, first_session_rows, combined_rows])
def test_probe_tables_are_their_artifacts(rows):
    page = _page()
    for row in rows():
        assert row in page, row


def test_the_combined_rule_is_left_out_where_dev_rows_prefer_the_head():
    """The page says dev rows would not choose the combination: true of both artifacts."""
    for stream in ("b77", "clinc150"):
        rules = _art(f"combined_answer_{stream}/combined_answer.json")["rules"]
        assert rules["head"]["dev_accuracy"] > rules["combined"]["dev_accuracy"], stream
    assert "It is not a candidate of `--answer auto`" in _page()


def more_steps_rows() -> list[str]:
    saved = _art("more_steps_b77/more_steps.json")["experiences"]
    steps = ("200", "400", "600")

    def pair(dev: float, test: float) -> str:
        return f"{_pct(dev)} / {_pct(test)}"

    out = [f"| {int(k) + 1} | {e['rows']['dev']} / {e['rows']['test']} | {pair(e['head']['dev'], e['head']['test'])} | "
           + " | ".join(pair(e["fine_tuned"][s]["dev"], e["fine_tuned"][s]["test"]) for s in steps) + " |"
           for k, e in saved.items()]

    def mean(get) -> float:
        return sum(get(e) for e in saved.values()) / len(saved)

    out.append("| mean | | " + pair(mean(lambda e: e["head"]["dev"]), mean(lambda e: e["head"]["test"])) + " | "
               + " | ".join(pair(mean(lambda e, s=s: e["fine_tuned"][s]["dev"]),
                                 mean(lambda e, s=s: e["fine_tuned"][s]["test"])) for s in steps) + " |")
    return out


def test_more_steps_table_is_its_artifact():
    page = _page()
    for row in more_steps_rows():
        assert row in page, row


def test_the_first_seeds_notes_are_its_artifact():
    """The README's notes on banking77's committed seed 0 quote that run's results.json."""
    runs = _art("runs/split-banking77-7-class/seed0/results.json")["strategies"]
    avg = {n: _pct(runs[n]["summary"]["average"]) for n in ("joint", "joint-probe", "ranpac", "graft", "lwf", "naive")}
    lwf = runs["lwf"]
    text = " ".join(_page().split())
    assert f"lwf's stored {lwf['bytes'] / 1e6:.1f} MB" in text
    assert f"frozen embeddings included ({lwf['info']['kept']['previous_model'] / 1e6:.1f} MB)" in text
    assert f"own {lwf['info']['model_bytes'] / 1e6:.1f} MB" in text
    assert f"7 × 200 steps ({avg['joint']})" in text and f"by SGD ({avg['joint-probe']})" in text
    assert f"(ranpac {avg['ranpac']}) and graft ({avg['graft']})" in text
    assert f"({avg['lwf']} against {avg['naive']})" in text


def test_clinc150s_first_seed_notes_are_its_artifact():
    """The README's notes on clinc150's committed seed 0 quote that run's results.json."""
    runs = _art("runs/split-clinc150-15-class/seed0/results.json")["strategies"]
    graft, ranpac = runs["graft"], runs["ranpac"]
    assert graft["summary"]["final"] == ranpac["summary"]["final"]               # "on every one of the experiences"
    assert graft["info"]["router"]["router"] == f"ranpac:{ranpac['info']['settings']['ranpac_ridge']:g}"
    avg = {n: _pct(r["summary"]["average"]) for n, r in runs.items()}
    cpu = {n: runs[n]["info"]["cpu_seconds"] for n in ("graft", "ranpac")}
    der = runs["der"]["info"]["tuning"]
    text = " ".join(_page().split())
    assert (f"every one of the {len(graft['summary']['final'])} experiences ({avg['ranpac']}), at "
            f"{cpu['graft'] / cpu['ranpac']:.1f}× its CPU seconds ({cpu['graft']:,.0f} against {cpu['ranpac']:,.0f})"
            ) in text
    assert f"joint {avg['joint']} (15 × 200 steps" in text and f"joint-probe {avg['joint-probe']}, below" in text
    assert f"lwf {avg['lwf']} against naive's {avg['naive']} (its teacher counted at " \
           f"{runs['lwf']['info']['kept']['previous_model'] / 1e6:.1f} MB" in text
    assert (f"scored {' / '.join(_pct(d) for d in der['dev_average'])} on dev (alpha {der['chosen']['der_alpha']:g} "
            f"kept), {avg['der']} after the last experience, below replay-matched {avg['replay-matched']}") in text


PROFILE = "profile_clinc150"
"""Issue 54 item 5's quiet profile: ``graft_naive/``, ``graft_float32/`` and ``heads/``, one ``results.json`` each."""
PROFILE_RUNS = ("graft_naive", "graft_float32", "heads")
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven")


def _profile() -> dict:
    """The quiet profile's three ``results.json``, by folder."""
    return {f: _art(f"{PROFILE}/{f}/results.json") for f in PROFILE_RUNS}


def quiet_profile_rows() -> list[str]:
    """The README's quiet-profile table: per strategy (graft with its defaults, graft with a float32 size search,
    naive, slda, ranpac) its accuracy, CPU seconds in all and per phase, wall seconds, peak memory and CPU over
    naive's."""
    runs = {f: r["strategies"] for f, r in _profile().items()}
    cols = [runs["graft_naive"]["graft"], runs["graft_float32"]["graft"], runs["graft_naive"]["naive"],
            runs["heads"]["slda"], runs["heads"]["ranpac"]]
    naive = cols[2]["info"]["cpu_seconds"]

    def row(label: str, cell) -> str:
        return f"| {label} | " + " | ".join(cell(c) for c in cols) + " |"

    def total(key: str):
        return lambda c: f"{sum(c['info'][key]):.0f}" if key in c["info"] else "–"

    return [row("after the last experience %", lambda c: _pct(c["summary"]["average"])),
            row("CPU s", lambda c: f"{c['info']['cpu_seconds']:.0f}"),
            row("training CPU s", lambda c: f"{c['info']['train_cpu_seconds']:.0f}"),
            row("of it: region search (wall s)", total("localize_seconds")),
            row("of it: feature passes (wall s)", total("feature_seconds")),
            row("evaluation CPU s", lambda c: f"{c['info']['eval_cpu_seconds']:.0f}"),
            row("wall s", lambda c: f"{c['seconds']:.0f}"),
            row("peak memory (RSS, MB)", lambda c: f"{c['info']['peak_rss_mb']:,}"),
            row("CPU over naive's", lambda c: f"{c['info']['cpu_seconds'] / naive:.2f}×")]


def test_quiet_profile_table_is_its_artifact():
    page = _page()
    for row in quiet_profile_rows():
        assert row in page, row
    profile = _profile()
    records = [r["run"] for r in profile.values()]
    conditions = [r["conditions"] for r in records]
    text = " ".join(page.split())
    assert {c["omp_num_threads"] for c in conditions} == {"1"}                      # "one thread"
    assert all(0.15 <= c["load_average_start"][0] <= 0.95 and round(c["load_average_end"][0], 1) == 1.0
               for c in conditions)                                                 # "nothing else running"
    assert "load average 0.2–0.9 at the start of each run and 1.0 at its end" in text
    assert {r["git_revision"][:7] for r in records} == {"bbf4bd9"} and "At bbf4bd9" in text
    assert all(r["conditions"]["bfloat16_native"] for r in records)
    native = [_art(f"runs/split-clinc150-15-class/seed{s}/results.json")["run"]["conditions"]["bfloat16_native"]
              for s in range(3)]
    assert native == [False, False, True] and "seeds 0 and 1 of clinc150 ran on one that does not" in text
    for r in records:
        assert " ".join(r["command_line"].split()) in " ".join(page.replace("\\\n", " ").split())
    for r in profile.values():                                           # "CPU seconds to within a second"
        for s in r["strategies"].values():
            i = s["info"]
            assert abs(s["seconds"] - i["cpu_seconds"]) < 1
            assert abs(i["train_seconds"] - i["train_cpu_seconds"]) < 1
            assert abs(i["eval_seconds"] - i["eval_cpu_seconds"]) < 1


def test_quiet_profile_notes_are_its_artifact():
    """The notes under the quiet-profile table quote its artifacts and the page's seed 0."""
    page = _art("runs/split-clinc150-15-class/seed0/results.json")["strategies"]
    run = {f: r["strategies"] for f, r in _profile().items()}
    bf16, f32, naive = run["graft_naive"]["graft"], run["graft_float32"]["graft"], run["graft_naive"]["naive"]
    assert bf16["info"]["settings"] == {**f32["info"]["settings"], "region_size": {
        **f32["info"]["settings"]["region_size"], "precision": "auto"}}              # "differ in precision alone"
    assert {z["precision"] for z in bf16["info"]["sizing"]} == {"bfloat16"}
    assert {z["precision"] for z in f32["info"]["sizing"]} == {"float32"}
    for g in (bf16, f32):
        assert g["matrix"] == page["graft"]["matrix"]                               # "row for row with either"
    assert all(run["heads"][n]["matrix"] == page[n]["matrix"] for n in ("slda", "ranpac"))
    assert f32["info"]["region_elements"] == page["graft"]["info"]["region_elements"]
    other = sum(a != b for a, b in zip(bf16["info"]["region_elements"], page["graft"]["info"]["region_elements"]))
    text = " ".join(_page().split())
    assert f"other sizes for {NUMBER_WORDS[other]} of the 15 tasks" in text
    cpu = naive["info"]["cpu_seconds"]
    assert (f"{bf16['info']['cpu_seconds'] / cpu:.2f}× naive's with its defaults here and "
            f"{f32['info']['cpu_seconds'] / cpu:.2f}× with the float32 search") in text
    extra = [sum(g["info"]["localize_seconds"]) + sum(g["info"]["feature_seconds"]) for g in (bf16, f32)]
    steps = [g["info"]["train_cpu_seconds"] - e for g, e in zip((bf16, f32), extra)]
    train = naive["info"]["train_cpu_seconds"]
    assert f"take {extra[0]:.0f} s ({extra[1]:.0f} s with the float32 search)" in text
    assert f"({steps[0]:.0f} and {steps[1]:.0f} s against {train:.0f} s)" in text
    assert max(abs(s - train) for s in steps) / train < 0.03                       # "to within 3%"
    assert f"{100 * extra[0] / train:.0f} and {100 * extra[1] / train:.0f}% of naive's training" in text
    assert f"({_pct(naive['summary']['average'])} against {_pct(page['naive']['summary']['average'])} after" in text
    cells = [[round(150 * abs(a - b)) for a, b in zip(x, y)] for x, y in zip(naive["matrix"], page["naive"]["matrix"])]
    first = next(i for i, row in enumerate(cells) if any(row))
    assert first == 7 and "from the eighth experience on" in text
    changed = [sum(c > 0 for c in row) for row in cells if any(row)]
    assert f"differs in {NUMBER_WORDS[len(changed)]} rows" in text
    assert set(changed) <= {1, 2}                                                       # "one or two cells each"
    assert f"by at most {max(map(max, cells))} of a cell's 150 test rows" in text
