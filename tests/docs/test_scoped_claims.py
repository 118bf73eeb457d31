"""README and the class-incremental text page scope their claims to the scenario, the runs and the clock they come
from: forget-free only with task labels; "ceiling" said of cumulative only with what it scores; the class runs named
by their revisions; a contended wall-time ratio beside its CPU seconds (all read from the committed records)."""
from __future__ import annotations

import json
import re

from helpers import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"
README = REPO_ROOT / "README.md"
CLASS_PAGE = RESULTS / "class_text" / "README.md"


def flat(path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def results(rel: str) -> dict:
    return json.loads((RESULTS / rel / "results.json").read_text(encoding="utf-8"))


def test_the_readme_promises_no_forgetting_only_with_task_labels():
    first = re.search(r"\*\*cl-graft finds(.*?)\*\*", flat(README)).group(1)
    assert "without forgetting" in first and "task label" in first, first


def test_the_readme_says_where_its_cumulative_ceiling_scores_below_naive():
    benches = json.loads((RESULTS / "digits" / "digits.json").read_text(encoding="utf-8"))["benchmarks"]
    below = [b["stream"] for b in benches if b["scenario"] == "task"
             and b["rows"]["cumulative"]["mean"] < b["rows"]["naive"]["mean"]]
    assert below and all(s.startswith("permuted-digits") for s in below)        # what the README's words cover
    text = flat(README)
    said = ("`cumulative` below is retrained on every row seen so far, a reference rather than a ceiling: with task "
            "labels on the permuted streams it scores below naive")
    assert said in text and "ceiling" not in text.replace(said, "")


def test_the_readme_names_the_revisions_of_the_class_runs_it_quotes():
    bullet = next(line for line in README.read_text(encoding="utf-8").splitlines()
                  if line.startswith("- **Class-incremental text**"))
    runs = sorted((RESULTS / "class_text" / "runs").glob("*/seed*/results.json"))
    assert runs                                                                    # the page's committed seeds
    for run in runs:
        revision = json.loads(run.read_text(encoding="utf-8"))["run"]["git_revision"][:7]
        assert f"`{revision}`" in bullet, f"README's class-incremental line should name {run.parent}'s revision"


def test_the_class_page_gives_cpu_seconds_beside_the_wall_time_ratio():
    run = results("class_text/clinc150_class_s0")["strategies"]
    graft, ncm = run["graft"], run["ncm"]
    cpu_g, cpu_n = graft["info"]["cpu_seconds"], ncm["info"]["cpu_seconds"]
    sentence = (f"at {graft['seconds'] / ncm['seconds']:.0f}× its wall time ({graft['seconds']:,.0f} s against "
                f"{ncm['seconds']:,.0f} s, wall seconds on a machine shared with other work; in CPU seconds "
                f"{cpu_g:,.0f} against {cpu_n:,.0f}, {cpu_g / cpu_n:.1f}×)")
    assert sentence in flat(CLASS_PAGE), sentence


def test_the_class_page_does_not_credit_the_step_count_alone():
    old, new = (results(f"class_text/{f}") for f in ("banking77_class_s0", "banking77_class_default_s0"))
    changed = {"steps": [r["run"]["config"]["recipe"]["steps"] for r in (old, new)],
               "revision": [r["run"]["git_revision"][:7] for r in (old, new)],
               "test rows": [r["run"]["eval_cap"] for r in (old, new)]}
    assert all(a != b for a, b in changed.values())                 # three things changed between the two runs
    text = flat(CLASS_PAGE)
    ncm = [f"{100 * r['strategies']['ncm']['summary']['average']:.1f}" for r in (old, new)]
    assert (f"the revision ({changed['revision'][1]} instead of {changed['revision'][0]}" in text
            and f"nearest class mean, which trains nothing, moved from {ncm[0]} to {ncm[1]}" in text)
    assert "a hypothesis until a better router is run" in text and "is the lever in this scenario" not in text
