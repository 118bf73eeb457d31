"""Stream families: what ``cl-graft run --stream`` accepts, one module per family, found as commands are.

A family is a module of this package that defines ``FAMILY``, a :class:`StreamFamily`: the grammar of its
``--stream`` specs (shown in ``--help``), which specs it claims (:attr:`StreamFamily.claims`), the scenarios it
serves, and :attr:`StreamFamily.setup`, which turns a :class:`StreamRequest` (the spec and the run's options)
into a :class:`StreamSetup`: the run record's stream fields (data identity included), the model every strategy
starts from and a function making the stream (and the tuning stream of ``--tune``). Nothing else lists a family:
the CLI looks a spec up with :func:`lookup` and names none. A family kept outside this package (a user's
own package, a plugin) joins through the entry-point group :data:`ENTRY_POINTS` (``[project.entry-points.
"cl_graft.streams"] toy = "toy_family"`` in its ``pyproject.toml``, naming a module that defines ``FAMILY``, or
``toy = "toy_family:FAMILY"``). Plugins are loaded only when a spec is looked up, so a broken one fails that
lookup alone, in one line naming it and its distribution. Exactly one family serves a spec: two families with one
name, or two claiming one spec, are an error naming both (built-in grammars that nest excepted: the higher
priority is the more specific); the run record names the family that served the stream
(:meth:`Registered.record`).

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
from importlib.metadata import EntryPoint
from types import ModuleType
from typing import Any, Protocol

import torch

from cl_graft import plugin_points
from cl_graft.errors import UserError
from cl_graft.plugin_points import Origin, one_line
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
        priority: the order of ``--help``'s grammars (descending); where built-in grammars nest (``split-digits``
            is digits' and fits ``split-TASK``'s pattern), the higher priority is the more specific and wins.
        catch_all: set on the family that takes the specs no other family claims (plain task lists; its
            ``claims`` take every spec): ``catch_all(spec, data_dir) -> bool``, whether the spec names its data
            (every item a registered task or a task folder), which makes its claim one that clashes with another
            family's (:func:`lookup`).
    """

    name: str
    grammar: str
    claims: Callable[[str], bool]
    setup: Callable[[StreamRequest], StreamSetup]
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    priority: int = 0
    catch_all: Callable[[str, str | None], bool] | None = None

    def check_scenario(self, scenario: str, spec: str) -> None:
        """Raises ``UserError`` when this family's streams do not serve ``scenario``."""
        if scenario not in self.scenarios:
            serves = " or ".join(f"--scenario {s}" for s in self.scenarios)
            raise UserError(f"--stream {spec} is a {self.name} stream: it runs with {serves}, not --scenario "
                            f"{scenario}")


ENTRY_POINTS = "cl_graft.streams"
"""The entry-point group of stream families kept in other packages: ``name = module`` (a module defining
``FAMILY``) or ``name = module:attr`` (the family itself)."""


@dataclass(frozen=True, kw_only=True)
class Registered:
    """A family and where it comes from (:class:`cl_graft.plugin_points.Origin`: its module, its distribution,
    a plugin's entry point)."""

    family: StreamFamily
    origin: Origin

    @property
    def plugin(self) -> bool:
        """Whether the family comes from a plugin."""
        return self.origin.entry_point is not None

    def describe(self) -> str:
        """``'digits' (built in)`` or ``'toy' (plugin toy = toy_family of toy-family 0.1)``, for messages."""
        return self.origin.describe(self.family.name)

    def record(self) -> dict:
        """The run record's ``stream_family`` field: the family's name, module, distribution and entry point."""
        return self.origin.record(self.family.name)

    def claims(self, spec: str) -> bool:
        """The family's claim of ``spec``.

        Raises:
            UserError: a plugin's ``claims`` that raises (one line naming the plugin).
        """
        try:
            return bool(self.family.claims(spec))
        except Exception as e:
            if not self.plugin:
                raise
            raise UserError(f"stream family {self.describe()} fails on --stream {spec!r}: {one_line(e)}") from None


def builtin() -> list[Registered]:
    """The families of this package: each of its modules (not starting with ``_``) that defines ``FAMILY``."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = f"{__name__}.{info.name}"
        family = None if info.name.startswith("_") else getattr(importlib.import_module(module), "FAMILY", None)
        if isinstance(family, StreamFamily):
            found.append(Registered(family=family, origin=Origin.builtin(module)))
    return found


def _family_of(loaded: object) -> StreamFamily | None:
    """The family a loaded entry point names: its module's ``FAMILY``, or its ``module:attr`` itself."""
    family = getattr(loaded, "FAMILY", None) if isinstance(loaded, ModuleType) else loaded
    return family if isinstance(family, StreamFamily) else None


def load_plugin(point: EntryPoint) -> Registered:
    """The family an entry point of :data:`ENTRY_POINTS` names (:func:`cl_graft.plugin_points.load`).

    Raises:
        UserError: the module cannot be imported or names no :class:`StreamFamily`; one line naming the plugin and
            its distribution.
    """
    family, origin = plugin_points.load(point, kind="stream family", pick=_family_of,
                                        wanted="StreamFamily (a module defining FAMILY, or module:attr of one)")
    return Registered(family=family, origin=origin)


def registered() -> list[Registered]:
    """Every family, built-in ones then plugins (:func:`load_plugin`), in descending priority.

    Raises:
        UserError: a plugin that cannot be loaded, or two families with one name (naming both).
    """
    found = builtin() + [load_plugin(point) for point in plugin_points.points(ENTRY_POINTS)]
    plugin_points.refuse_one_name_twice([(entry.family.name, entry.origin) for entry in found],
                                        kinds="stream families")
    return sorted(found, key=lambda entry: -entry.family.priority)


def families() -> dict[str, StreamFamily]:
    """Name → family, every family of :func:`registered`, in descending priority.

    Raises:
        UserError: as :func:`registered`.
    """
    return {entry.family.name: entry.family for entry in registered()}


def lookup(spec: str, *, data_dir: str | None = None) -> Registered:
    """The family that serves ``spec``: the one family claiming it.

    Claims are gathered from every family (:func:`registered`): among built-in ones whose grammars nest, the
    highest priority; every plugin that claims it; the catch-all when the spec names its data (``data_dir``: the
    run's ``--data-dir``, None for ``$CL_GRAFT_DATA``). Only when none of them does, the catch-all takes it.

    Raises:
        UserError: a plugin that cannot be loaded, two families with one name, two families claiming ``spec``
            (naming both), or none claiming it (listing the grammars); one line each.
    """
    spec = spec.strip()
    table = registered()
    grammars = [entry for entry in table if entry.family.catch_all is None and entry.claims(spec)]
    catch_all = [entry for entry in table if entry.family.catch_all is not None]
    claimants = ([entry for entry in grammars if not entry.plugin][:1]
                 + [entry for entry in grammars if entry.plugin]
                 + [entry for entry in catch_all if entry.family.catch_all(spec, data_dir)])
    if not claimants:
        claimants = [entry for entry in catch_all if entry.claims(spec)]
    if len(claimants) > 1:
        raise _ambiguous(spec, claimants)
    if not claimants:
        raise UserError(f"--stream {spec!r} is no stream: " + "; ".join(e.family.grammar for e in table))
    return claimants[0]


def _ambiguous(spec: str, claimants: list[Registered]) -> UserError:
    """The error for a spec that several families claim: it names them all and what the user can change."""
    named = ", ".join(entry.describe() for entry in claimants[:-1]) + f" and {claimants[-1].describe()}"
    mend = (["rename the task folder"] if any(e.family.catch_all is not None for e in claimants) else []) + \
           (["mend or uninstall the plugin"] if any(e.plugin for e in claimants) else [])
    return UserError(f"--stream {spec!r} is claimed by more than one stream family: {named}; none is chosen for you"
                     + (f" ({' or '.join(mend)})" if mend else ""))


def find_family(spec: str, *, data_dir: str | None = None) -> StreamFamily:
    """The family that serves ``spec`` (:func:`lookup`).

    Raises:
        UserError: as :func:`lookup`.
    """
    return lookup(spec, data_dir=data_dir).family


def grammar() -> str:
    """The built-in families' grammars and the plugins' names, for ``--help``: no plugin is loaded (a broken one
    fails only the lookup of a ``--stream``)."""
    text = " Or: ".join(entry.family.grammar for entry in sorted(builtin(), key=lambda e: -e.family.priority))
    plugins = plugin_points.listing(ENTRY_POINTS)
    return text + (f". Or a plugin family's stream (entry point group {ENTRY_POINTS}): {plugins}" if plugins else "")


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
    return find_family(record["stream"], data_dir=data_dir).setup(StreamRequest(
        spec=record["stream"], scenario=record["scenario"], data=data, seed=record["seed"], model=record["model"],
        head=record.get("head", "linear"), fresh_head=record.get("fresh_head", False), data_dir=data_dir,
        class_order=None if order is None else ",".join(map(str, order))))
