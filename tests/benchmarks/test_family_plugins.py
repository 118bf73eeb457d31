"""Stream-family plugins (entry points of ``cl_graft.streams``, each a temporary ``*.dist-info`` on the path): a
broken one fails only the lookup of a ``--stream``, in one line naming it and its distribution; ``module:attr``
entry points load; two families with one name, or two claiming one spec, are an error naming both; a task folder
named ``split-…`` is refused as ambiguous alone and runs in a list."""
from __future__ import annotations

import importlib
import json
import sys

import pytest
from click.testing import CliRunner

from cl_graft.benchmarks.families import StreamRequest, families, lookup
from cl_graft.benchmarks.data import load_task
from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.presets import get_preset

from helpers import entry_point_module, save_tiny_model, write_task

FAMILY_OF = '''
    from cl_graft.benchmarks.families import StreamFamily

    FAMILY = StreamFamily(name={name!r}, grammar="a plugin's stream", setup=None, claims={claims})
'''
BROKEN = {"ImportError": "from json import no_such_name\n",
          "SyntaxError": "def broken(:\n",
          "RuntimeError": "raise RuntimeError('the plugin needs a licence key\\nsecond line')\n"}
MODULES = ("plugin_family", "greedy_family", "digits_family")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """``add(module, source, name=...)`` installs a plugin distribution in ``tmp_path`` (on the path); its modules
    are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def add(module: str, source: str, *, name: str = "toy") -> object:
        points = entry_point_module(tmp_path, module, source, group="cl_graft.streams", name=name)
        importlib.invalidate_caches()
        return points

    yield add
    for module in MODULES:
        sys.modules.pop(module, None)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_plugin_fails_only_the_stream_lookup(plugins, monkeypatch, kind):
    plugins("plugin_family", BROKEN[kind])
    monkeypatch.delitem(sys.modules, "cl_graft.cli.run", raising=False)        # its --help is built as it loads
    for args in (["--help"], ["run", "--help"], ["finetune", "--help"], ["export", "--help"], ["plot", "--help"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0 and res.exception is None, (args, res.output, res.exception)
    assert "toy (plugin-family 0.1)" in " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    with pytest.raises(UserError) as refused:
        lookup("sst2,cr")
    message = str(refused.value)
    assert "\n" not in message and kind in message, message
    assert "plugin toy = plugin_family" in message and "distribution plugin-family 0.1" in message, message


def test_an_entry_point_may_name_the_family_itself(plugins):
    points = plugins("plugin_family", FAMILY_OF.format(name="echo", claims="lambda spec: spec.startswith('echo:')"))
    points.write_text("[cl_graft.streams]\ntoy = plugin_family:FAMILY\n")
    found = lookup("echo:2")
    assert found.family is importlib.import_module("plugin_family").FAMILY
    assert found.record() == {"name": "echo", "module": "plugin_family:FAMILY", "distribution": "plugin-family 0.1",
                              "entry_point": "toy"}
    points.write_text("[cl_graft.streams]\ntoy = plugin_family:build\n")
    with pytest.raises(UserError, match="toy = plugin_family:build .* cannot be loaded: AttributeError"):
        lookup("echo:2")


def test_a_plugin_family_named_as_a_built_in_one_is_refused(plugins):
    plugins("digits_family", FAMILY_OF.format(name="digits", claims="lambda spec: spec == 'mine'"))
    with pytest.raises(UserError) as refused:
        lookup("permuted-digits:3")
    assert "two stream families are called 'digits': 'digits' (built in) and 'digits' (plugin toy = " \
           "digits_family of digits-family 0.1)" in str(refused.value)


def test_two_families_claiming_one_spec_are_refused_naming_both(plugins):
    plugins("greedy_family", FAMILY_OF.format(name="greedy", claims="lambda spec: True"))
    assert "greedy" in families()
    for spec, other in (("split-digits", "'digits' (built in)"), ("sst2,cr", "'task-list' (built in)"),
                        ("split-clinc150:15", "'split text' (built in)")):
        with pytest.raises(UserError) as refused:
            lookup(spec)
        message = str(refused.value)
        assert "claimed by more than one stream family" in message and other in message, message
        assert "'greedy' (plugin toy = greedy_family of greedy-family 0.1)" in message, message
    assert lookup("greedy:stream").family.name == "greedy"           # what no other family reads is its own


def test_a_task_folder_named_split_is_a_task_alone_and_in_a_list(tmp_path):
    data = tmp_path / "data"
    rows = [{"text": f"row {i}", "label": i % 2} for i in range(8)]
    for name in ("split-foo", "split-digits"):
        write_task(data / name, ["no", "yes"], {"train": rows, "test": rows})
    assert lookup("split-foo", data_dir=str(data)).family.name == "task-list"      # a split stream needs ":N"
    assert lookup("split-foo:2", data_dir=str(data)).family.name == "split text"
    with pytest.raises(UserError) as refused:                                       # digits' own name stays its own
        lookup("split-digits", data_dir=str(data))
    assert "'digits' (built in) and 'task-list' (built in)" in str(refused.value), str(refused.value)
    with pytest.raises(UserError, match=r"unknown task 'split-foo' \(a split stream is written split-TASK:N\)"):
        load_task("split-foo", str(tmp_path))                                      # no such folder there
    found = lookup("split-foo,split-digits", data_dir=str(data))
    assert found.family.name == "task-list"
    setup = found.family.setup(StreamRequest(spec="split-foo,split-digits", scenario="task", seed=0,
                                             data=get_preset("smoke", seed=0), model=str(save_tiny_model(
                                                 tmp_path / "model")), data_dir=str(data)))
    assert setup.record["tasks"] == ["split-foo", "split-digits"]
