"""Stream families: what ``cl-graft run --stream`` accepts, one module per family, found as commands are.

A family is a module of this package that defines ``FAMILY``, a :class:`StreamFamily`: the grammar of its
``--stream`` specs (shown in ``--help``), which specs it claims (:attr:`StreamFamily.claims`), the scenarios it
serves, and :attr:`StreamFamily.setup`, which turns a :class:`StreamRequest` (the spec and the run's options)
into a :class:`StreamSetup`: the run record's stream fields (data identity included), the model every strategy
starts from and a function making the stream (and the tuning stream of ``--tune``). Nothing else lists a family:
the CLI looks a spec up with :func:`find_family` and names none. A family kept outside this package (a user's
own package) joins through the entry-point group :data:`ENTRY_POINTS` (``[project.entry-points."cl_graft.streams"]
toy = "toy_family"`` in its ``pyproject.toml``, naming a module that defines ``FAMILY``).

A stream, whatever its family, offers what the harness reads (:class:`ContinualStream`): its ``name``, task names
in order (``tasks``), its ``scenario``, the Avalanche ``benchmark`` (``train_stream``, ``test_stream``, and
``valid_stream`` when it has dev rows) and ``splits``: each task's text rows (:class:`~cl_graft.task.TaskRows`),
empty for streams that are not made of text rows. :func:`recorded_setup` makes a run's setup again from its record
(the same starting model), for the commands that read a run back.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from cl_graft.errors import UserError
from cl_graft.presets import Preset, get_preset
from cl_graft.schema import ListOf, MapOf, Nullable, Obj
from cl_graft.task import SCENARIOS, TaskRows


class ContinualStream(Protocol):
    """What every stream offers the harness (see the module docstring)."""

    name: str
    scenario: str
    benchmark: Any

    @property
    def tasks(self) -> list[str]: ...

    @property
    def splits(self) -> tuple[TaskRows, ...]: ...


@dataclass(frozen=True, kw_only=True)
class StreamRequest:
    """A ``--stream`` spec and the options of ``cl-graft run`` a family may read.

    Attributes:
        spec: the ``--stream`` text.
        scenario: ``task`` or ``class`` (:data:`cl_graft.task.SCENARIOS`).
        data: the preset's data sizes (``k``, ``dev_k``, ``eval_cap``, ``max_length``), overrides applied.
        seed: the run's seed.
        tune: whether ``--tune`` needs a tuning stream (train and dev rows only).
        model, head, fresh_head: ``--model``, ``--head``, ``--fresh-head``.
        data_dir: ``--data-dir`` (None: ``$CL_GRAFT_DATA``, else the Hub).
        device: where the model lives.
        given: the options the user set explicitly (``k``, ``eval_cap``, ``head``, ``fresh_head``,
            ``data_dir``, ``class_order``), so a family can refuse those that mean nothing to it.
        class_order: ``--class-order``, comma-separated label indices, or None (a seeded permutation).
    """

    spec: str
    scenario: str
    data: Preset
    seed: int
    tune: bool = False
    model: str = "minilm"
    head: str = "linear"
    fresh_head: bool = False
    data_dir: str | None = None
    device: torch.device | str = "cpu"
    given: frozenset[str] = frozenset()
    class_order: str | None = None

    def refuse(self, options: tuple[str, ...], family: str) -> None:
        """Refuses the options of ``options`` that were given (``--k`` ... named as on the command line).

        Raises:
            UserError: one line naming every such option.
        """
        bad = [o for o in options if o in self.given]
        if bad:
            names = ", ".join("--" + o.replace("_", "-") for o in bad)
            raise UserError(f"{names} {'does' if len(bad) == 1 else 'do'} not apply to {family} streams "
                            f"(--stream {self.spec})")


@dataclass(frozen=True)
class StreamSetup:
    """What a family made of a request.

    Attributes:
        record: the run record's stream fields (``stream``, ``tasks``, ``model``, the data's identity...).
        base: the model every strategy starts from (never modified by the run).
        make: ``make() -> (stream, tuning stream or None)``: called once the output folder is claimed.
        source: where the data comes from, for the run record (a folder, the Hub, a library).
    """

    record: dict
    base: torch.nn.Module
    make: Callable[[], tuple[ContinualStream, ContinualStream | None]]
    source: str


@dataclass(frozen=True, kw_only=True)
class StreamFamily:
    """One kind of stream (see the module docstring).

    Attributes:
        name: what it is called in messages (``tasks``, ``split text``, ``digits``).
        grammar: its specs as ``--help`` shows them, one sentence.
        claims: ``claims(spec) -> bool``: whether a spec is this family's (its grammar, not yet validated).
        setup: ``setup(request) -> StreamSetup`` (raises ``UserError`` on a bad spec or option, one line).
        scenarios: the scenarios its streams serve.
        priority: families are asked in descending priority; the catch-all (plain task lists) has the lowest.
    """

    name: str
    grammar: str
    claims: Callable[[str], bool]
    setup: Callable[[StreamRequest], StreamSetup]
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    priority: int = 0

    def check_scenario(self, scenario: str, spec: str) -> None:
        """Raises ``UserError`` when this family's streams do not serve ``scenario``."""
        if scenario not in self.scenarios:
            serves = " or ".join(f"--scenario {s}" for s in self.scenarios)
            raise UserError(f"--stream {spec} is a {self.name} stream: it runs with {serves}, not --scenario "
                            f"{scenario}")


ENTRY_POINTS = "cl_graft.streams"
"""The entry-point group of stream families kept in other packages (each names a module defining ``FAMILY``)."""


def families() -> dict[str, StreamFamily]:
    """Name → family: every module of this package that defines ``FAMILY``, then those of the
    :data:`ENTRY_POINTS` group, in descending priority.

    Raises:
        UserError: an entry point that cannot be imported or names no module with a ``FAMILY``.
    """
    from importlib.metadata import entry_points

    modules = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    found = {}
    for name in modules + [point.value for point in entry_points(group=ENTRY_POINTS)]:
        try:
            family = getattr(importlib.import_module(name), "FAMILY", None)
        except ImportError as e:
            raise UserError(f"stream family module {name!r} (entry point group {ENTRY_POINTS}) cannot be imported: "
                            f"{e}") from None
        if isinstance(family, StreamFamily):
            found[family.name] = family
        elif name not in modules:
            raise UserError(f"stream family module {name!r} (entry point group {ENTRY_POINTS}) defines no FAMILY")
    return dict(sorted(found.items(), key=lambda kv: -kv[1].priority))


def find_family(spec: str) -> StreamFamily:
    """The family that claims ``spec`` (the first in descending priority).

    Raises:
        UserError: none does (one line listing the grammars).
    """
    table = families()
    for family in table.values():
        if family.claims(spec.strip()):
            return family
    raise UserError(f"--stream {spec!r} is no stream: " + "; ".join(f.grammar for f in table.values()))


def grammar() -> str:
    """Every family's grammar, for ``--help``."""
    return " Or: ".join(f.grammar for f in families().values())


RECORDED = Obj({"stream": str, "tasks": ListOf(str), "scenario": str, "seed": int, "model": str, "preset": str},
               {"head": str, "fresh_head": bool, "k": int, "dev_k": int, "eval_cap": Nullable(int), "max_length": int,
                "class_order": ListOf(int), "data_sha256": MapOf(str)})
"""The fields of a ``cl-graft run`` record (``config.json``) that :func:`recorded_setup` reads, for a family's
stream (one ``--stream`` spec)."""


def recorded_setup(record: dict, data_dir: str | None) -> StreamSetup:
    """The setup of the stream a ``cl-graft run`` record describes (:data:`RECORDED`, checked by the caller): the
    same family, options, class order and seeded starting model as the run's, to read its saved state back
    (``cl-graft export``, the class-answer probe). Data sizes the record lacks are its preset's.

    Raises:
        UserError: as the family's setup does (a spec or option it refuses, data it cannot find).
    """
    sizes = {k: record[k] for k in ("k", "dev_k", "eval_cap", "max_length") if k in record}
    data = replace(get_preset(record["preset"], seed=record["seed"]), **sizes)
    order = record.get("class_order")
    return find_family(record["stream"]).setup(StreamRequest(
        spec=record["stream"], scenario=record["scenario"], data=data, seed=record["seed"], model=record["model"],
        head=record.get("head", "linear"), fresh_head=record.get("fresh_head", False), data_dir=data_dir,
        class_order=None if order is None else ",".join(map(str, order))))
