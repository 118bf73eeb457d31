"""What `cl-graft run` shows: the summary table keeps its columns aligned whatever the names' lengths; what a
table shows of a strategy beyond its accuracies, and which results it is compared with, come from the entries;
training shows the warnings a user can act on, not Avalanche's deprecation notices."""
from __future__ import annotations

from dataclasses import replace

from cl_graft.strategies.comparison.registry import STRATEGIES
from cl_graft.strategies.comparison.report import result_flags, strategy_table, summary_table
from cl_graft.strategies.comparison.runner import StrategyResult


def _result(name: str, tasks: list[str], acc: float) -> StrategyResult:
    matrix = [[acc if j <= i else float("nan") for j in range(len(tasks))] for i in range(len(tasks))]
    return StrategyResult(name=name, tasks=tasks, matrix=matrix, seconds=1.0, bytes=1000)


def test_long_strategy_and_task_names_keep_every_column_aligned():
    tasks = ["a-long-task-name", "sst2"]
    results = {n: _result(n, tasks, acc) for n, acc in (("naive", 0.5), ("replay-matched", 0.6), ("graft", 0.7))}
    rows = summary_table(results).splitlines()[:1 + len(results)]
    assert len({len(r) for r in rows}) == 1, rows                  # every row as wide as the header
    ends = [r.index("a-long-task-name") + len("a-long-task-name") for r in rows[:1]]
    assert [r[ends[0] - 4:ends[0]] for r in rows[1:]] == ["50.0", "60.0", "70.0"], rows   # under the name
    assert rows[2][len("replay-matched")] == " "                   # the longest name does not touch its number


def test_the_reference_columns_and_flags_follow_the_roles_the_entries_play(monkeypatch):
    tasks = ["a", "b"]
    results = {n: _result(n, tasks, acc) for n, acc in (("naive", 0.5), ("single", 0.8), ("graft", 0.5))}
    assert summary_table(results).splitlines()[0].split()[-2:] == ["%single", "×naive"]
    assert list(result_flags(results)) == ["graft"]                  # its matrix equals the plain reference's
    monkeypatch.setitem(STRATEGIES, "naive", replace(STRATEGIES["naive"], reference=None))
    monkeypatch.setitem(STRATEGIES, "graft", replace(STRATEGIES["graft"], reference="plain"))
    assert summary_table(results).splitlines()[0].split()[-2:] == ["%single", "×graft"]
    assert list(result_flags(results)) == ["naive"]


def test_a_strategy_table_shows_the_lines_its_entry_adds(monkeypatch):
    res = _result("graft", ["a", "b"], 0.7)
    res.info["sizing"] = [{"task": "a", "share": 0.05}, {"task": "b", "share": 0.02}]
    assert strategy_table(res).splitlines()[-2:] == ["task a: region 5.00% of graftable elements",
                                                     "task b: region 2.00% of graftable elements"]
    assert "region" not in strategy_table(replace(res, name="naive"))
    monkeypatch.setitem(STRATEGIES, "graft", replace(STRATEGIES["graft"], report_lines=lambda info: ["mine"]))
    assert strategy_table(res).splitlines()[-1] == "mine"


def test_training_drops_avalanches_deprecation_notices_but_keeps_other_warnings():
    """Avalanche's ``@deprecated`` turns the filters to "always" before it warns, so an "ignore" filter around
    ``train`` did not hold (every replay experience printed a DeprecationWarning)."""
    import warnings

    from cl_graft.strategies.comparison.clock import train_experience

    class Strategy:
        def train(self, experience):
            warnings.simplefilter("always", DeprecationWarning)        # what Avalanche's decorator does
            warnings.warn("Call to deprecated function update", DeprecationWarning)
            warnings.warn("task 0 kept less than it should", UserWarning)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        train_experience(Strategy(), experience=None, seed=0)
    assert [w.category for w in shown] == [UserWarning]
