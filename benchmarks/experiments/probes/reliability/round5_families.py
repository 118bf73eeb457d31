"""Stream families (issue 56, items 5 and 6): a stream-family plugin (a ``*.dist-info`` of the entry-point group
"cl_graft.streams" on ``PYTHONPATH``) that cannot be imported (ImportError, SyntaxError, RuntimeError) leaves
``--help`` and every other command working and fails only ``run --stream``, in one line naming it and its
distribution; a ``module:attr`` entry point serves its stream, recorded in config.json; a plugin family named as a
built-in one, or one claiming every spec, is refused naming both; a task folder ``split-foo`` is ambiguous alone
(split text and task-list, named) and runs as a task of a list."""
from __future__ import annotations

import json
from pathlib import Path

from .harness import DIGITS, RUN, Case, Probe, plugin_distribution, refused_naming

STREAMS = "cl_graft.streams"
"""The stream families' entry-point group."""

TITLE = "stream-family plugins and overlapping families"

BROKEN = {"ImportError": "from json import no_such_name\n",
          "SyntaxError": "def broken(:\n",
          "RuntimeError": "raise RuntimeError('the plugin needs a licence key')\n"}
FAMILY_OF = '''from cl_graft.benchmarks.families import StreamFamily

FAMILY = StreamFamily(name={name!r}, grammar="a plugin's stream", setup=None, claims={claims})
'''
DIGITS_AGAIN = '''import dataclasses

from cl_graft.benchmarks.families import StreamFamily
from cl_graft.benchmarks.families.digits import FAMILY as DIGITS


def setup(request):
    return DIGITS.setup(dataclasses.replace(request, spec="split-digits"))


MY_DIGITS = StreamFamily(name="r5-digits", grammar="r5-digits: split-digits again", setup=setup,
                         claims=lambda spec: spec == "r5-digits")
'''


def cases(p: Probe) -> list[Case]:
    r = p.root / "r5"
    o = r / "o"
    d = ["--data-dir", p.data]
    plugin = {kind: plugin_distribution(STREAMS, r / "plugins" / kind.lower(), "r5_broken", source) for kind, source in BROKEN.items()}
    plugin["module:attr"] = plugin_distribution(STREAMS, r / "plugins" / "attr", "r5_digits", DIGITS_AGAIN, value="r5_digits:MY_DIGITS")
    plugin["named digits"] = plugin_distribution(STREAMS, r / "plugins" / "named", "r5_named", FAMILY_OF.format(
        name="digits", claims="lambda spec: spec == 'mine'"))
    plugin["greedy"] = plugin_distribution(STREAMS, r / "plugins" / "greedy", "r5_greedy", FAMILY_OF.format(
        name="greedy", claims="lambda spec: True"))
    data = _split_tasks(p)
    cases = [Case(f"{kind} plugin: cl-graft {' '.join([*command, '--help'])}", [*command, "--help"], want=0,
                  env=plugin[kind], check=lambda: "help shown")
             for kind, command in (("SyntaxError", []), ("ImportError", ["run"]), ("RuntimeError", ["finetune"]),
                                   ("SyntaxError", ["export"]), ("SyntaxError", ["plot"]))]
    for kind, stream in (("ImportError", "sst2,cr"), ("SyntaxError", "split-digits"), ("RuntimeError", "sst2,cr")):
        cases.append(refused_naming(f"{kind} plugin: run --stream {stream}", ["run", "--stream", stream, *d, *RUN,
                                                                       "--out", o],
                            o, plugin[kind], "plugin toy = r5_broken", "distribution r5-broken 0.1", kind))
    served = Case("module:attr plugin: run --stream r5-digits",
                  ["run", "--stream", "r5-digits", *DIGITS, "--steps", "2", "--strategies", "naive", "--out",
                   r / "attr"], want=0, env=plugin["module:attr"])
    served.check = _recorded_family(r / "attr", "r5-digits", "r5-digits 0.1")
    cases.append(served)
    cases.append(refused_naming("plugin family named digits: run --stream permuted-digits:3",
                        ["run", "--stream", "permuted-digits:3", *DIGITS, "--out", o], o, plugin["named digits"],
                        "two stream families are called 'digits'", "'digits' (built in)", "r5-named 0.1"))
    for stream, other in (("sst2,cr", "'task-list' (built in)"), ("split-digits", "'digits' (built in)")):
        cases.append(refused_naming(f"plugin claiming every spec: run --stream {stream}",
                            ["run", "--stream", stream, *d, *RUN, "--out", o], o, plugin["greedy"],
                            "claimed by more than one stream family", other, "'greedy' (plugin toy = r5_greedy"))
    alone = Case("task folder split-foo: run --stream split-foo",
                 ["run", "--stream", "split-foo", "--data-dir", data, *RUN, "--strategies", "naive", "--out",
                  r / "alone"], want=0)                               # a split stream is written split-TASK:N
    alone.check = _recorded_family(r / "alone", "task-list", "cl-graft ")
    cases.append(alone)
    listed = Case("task folder split-foo: run --stream split-foo,r5-plain",
                  ["run", "--stream", "split-foo,r5-plain", "--data-dir", data, *RUN, "--strategies", "naive",
                   "--out", r / "listed"], want=0)
    listed.check = _recorded_family(r / "listed", "task-list", "cl-graft ")
    cases.append(listed)
    return cases


def _split_tasks(p: Probe) -> Path:
    """The task folders ``split-foo`` and ``r5-plain`` (sst2's rows, valid meta.json), under ``p.bad``."""
    for name in ("split-foo", "r5-plain"):
        p.task(name, p.rows(200))
    return p.bad


def _recorded_family(folder: Path, family: str, distribution: str):
    """A check: ``folder/config.json`` names ``family`` and (the start of) its distribution."""
    def check() -> str:
        record = json.loads((folder / "config.json").read_text()).get("stream_family") or {}
        if record.get("name") == family and str(record.get("distribution", "")).startswith(distribution):
            return f"config.json: stream_family {family} of {record['distribution']}"
        return f"FAILED: config.json's stream_family is {record}"
    return check
