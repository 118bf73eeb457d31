"""Strategy plugins (entry points of ``"cl_graft.strategies"``, each a temporary ``*.dist-info`` on the path), as
stream-family plugins are: a broken one leaves every command working and fails only a ``--strategies`` lookup
that needs plugins, in one line naming its entry point and distribution; ``--help`` lists plugins without loading
them; ``module:attr`` entry points load; a strategy named as another one is refused naming both; a plugin's
settings options are read once ``--strategies`` names it."""
from __future__ import annotations

import importlib
import sys

import pytest
from click.testing import CliRunner

from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.strategies.comparison.registry import STRATEGIES, find, parse_strategies

from helpers import entry_point_module

ENTRY_OF = '''
    from dataclasses import dataclass, field

    from cl_graft.strategies.interface.entry import StrategyEntry
    from cl_graft.strategies.interface.settings import Settings


    @dataclass(frozen=True)
    class ToySettings(Settings):
        toy_scale: float = field(default=1.0, metadata={{"help": "Toy: factor on every training loss."}})


    ENTRIES = tuple(StrategyEntry(name=name, help="a plugin's", stores="nothing", build=print, kept_bytes=print,
                                  settings=ToySettings) for name in {names!r})
    ENTRY = ENTRIES[0]
'''
BROKEN = {"ImportError": "from json import no_such_name\n",
          "SyntaxError": "def broken(:\n",
          "RuntimeError": "raise RuntimeError('the plugin needs a licence key\\nsecond line')\n"}
MODULES = ("plugin_strategy", "other_strategy")
RUN = ["run", "--stream", "permuted-digits:2", "--model", "mlp"]
PASSED = "--tune-budget is the number of grid points --tune tries"      # a check after the strategies' lookup


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """``add(module, source, name=...)`` installs a plugin distribution in ``tmp_path`` (on the path) and returns
    its ``entry_points.txt``; its modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def add(module: str, source: str, *, name: str = "toy"):
        points = entry_point_module(tmp_path, module, source, group="cl_graft.strategies", name=name)
        importlib.invalidate_caches()
        return points

    yield add
    for module in MODULES:
        sys.modules.pop(module, None)


def _error(args: list[str], tmp_path) -> str:
    """The one line ``cl-graft ARGS --out tmp_path/o`` exits 2 with; nothing is written."""
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.strip().count("\n") == 0, result.output
    assert not (tmp_path / "o").exists()
    return result.output


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_plugin_fails_only_a_lookup_that_needs_plugins(plugins, monkeypatch, tmp_path, kind):
    plugins("plugin_strategy", BROKEN[kind])
    monkeypatch.delitem(sys.modules, "cl_graft.cli.run", raising=False)        # its --help is built as it loads
    for args in (["--help"], ["run", "--help"], ["finetune", "--help"], ["export", "--help"], ["plot", "--help"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0 and res.exception is None, (args, res.output, res.exception)
    assert "toy (plugin-strategy 0.1)" in " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert parse_strategies("graft,naive") == ["graft", "naive"]               # built-in names load no plugin
    assert PASSED in _error([*RUN, "--strategies", "naive", "--tune-budget", "2"], tmp_path)
    message = _error([*RUN, "--strategies", "naive,toy"], tmp_path)
    assert kind in message and "strategy plugin toy = plugin_strategy" in message, message
    assert "distribution plugin-strategy 0.1" in message, message


def test_an_entry_point_may_name_an_entry_or_a_tuple_of_them(plugins):
    points = plugins("plugin_strategy", ENTRY_OF.format(names=("toy", "toy-2")))
    module = importlib.import_module("plugin_strategy")
    assert find("toy") is module.ENTRY and find("toy-2") is module.ENTRIES[1]          # a module's ENTRIES
    points.write_text("[cl_graft.strategies]\ntoy = plugin_strategy:ENTRY\n")
    assert find("toy") is module.ENTRY and find("toy-2") is None
    points.write_text("[cl_graft.strategies]\ntoy = plugin_strategy:ENTRIES\n")
    assert find("toy-2") is module.ENTRIES[1]
    for value, why in (("plugin_strategy:ToySettings", "names no StrategyEntry"),
                       ("plugin_strategy:missing", "cannot be loaded: AttributeError"), ("json", "names no"),
                       ("no_such_module", "cannot be loaded: ModuleNotFoundError")):
        points.write_text(f"[cl_graft.strategies]\ntoy = {value}\n")
        with pytest.raises(UserError) as refused:
            parse_strategies("toy")
        assert f"strategy plugin toy = {value} (entry point group cl_graft.strategies, distribution " \
               f"plugin-strategy 0.1)" in str(refused.value) and why in str(refused.value), str(refused.value)


def test_a_strategy_named_as_another_is_refused_naming_both(plugins):
    plugins("plugin_strategy", ENTRY_OF.format(names=("naive", "toy")))
    assert parse_strategies("naive") == ["naive"] and "naive" in STRATEGIES           # built in: no plugin loaded
    with pytest.raises(UserError) as refused:
        parse_strategies("toy")
    assert "two strategies are called 'naive': 'naive' (built in) and 'naive' (plugin toy = plugin_strategy of " \
           "plugin-strategy 0.1)" in str(refused.value), str(refused.value)


def test_two_plugins_with_one_strategy_name_are_refused_naming_both(plugins):
    plugins("plugin_strategy", ENTRY_OF.format(names=("mine",)))
    plugins("other_strategy", ENTRY_OF.format(names=("mine",)), name="other")
    with pytest.raises(UserError) as refused:
        find("mine")
    message = str(refused.value)
    assert "two strategies are called 'mine'" in message and "(plugin toy = plugin_strategy of plugin-strategy " \
           "0.1)" in message and "(plugin other = other_strategy of other-strategy 0.1)" in message, message


def test_a_plugins_settings_options_are_read_once_it_is_named(plugins, tmp_path):
    plugins("plugin_strategy", ENTRY_OF.format(names=("toy",)))
    assert PASSED in _error([*RUN, "--strategies", "toy", "--toy-scale", "0.5", "--tune-budget", "2"], tmp_path)
    for strategies, value, said in (("toy", "abc", "Invalid value for '--toy-scale'"),
                                    ("naive", "0.5", "No such option '--toy-scale'")):
        result = CliRunner().invoke(main, [*RUN, "--strategies", strategies, "--toy-scale", value, "--out",
                                           str(tmp_path / "o")])
        assert result.exit_code == 2 and said in result.output, result.output
    result = CliRunner().invoke(main, [*RUN, "--strategies", "naive", "--stepz", "2", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "No such option '--stepz'" in result.output and not (tmp_path / "o").exists()
