"""Plugins: what other packages add through an entry-point group (stream families through ``"cl_graft.streams"``,
strategies through ``"cl_graft.strategies"``). A group's plugins are listed without being imported
(:func:`listing`, for ``--help``) and loaded only when something is looked up (:func:`load`), so a broken plugin
fails that lookup alone, in one line naming it and its distribution, whatever its import raises. An entry point
names a module (``toy = "toy_family"``) or an object in it (``toy = "toy_family:FAMILY"``); the caller says what
it must hold. Two registered objects with one name are an error naming both (:func:`refuse_one_name_twice`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points, version
from typing import Any, TypeVar

from .errors import UserError

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Origin:
    """Where a registered object (a stream family, a strategy) comes from.

    Attributes:
        module: the module that defines it (a plugin's entry point value, ``toy_family:FAMILY``).
        distribution: the distribution that installed it, ``name version`` (cl-graft's own for a built-in one).
        entry_point: a plugin's entry-point name (None: built in).
    """

    module: str
    distribution: str
    entry_point: str | None = None

    @classmethod
    def builtin(cls, module: str) -> Origin:
        """A built-in object of ``module`` (cl-graft's distribution)."""
        return cls(module=module, distribution=distribution(None))

    def describe(self, name: str) -> str:
        """``'digits' (built in)`` or ``'toy' (plugin toy = toy_family of toy-family 0.1)``, for messages."""
        if self.entry_point is None:
            return f"{name!r} (built in)"
        return f"{name!r} (plugin {self.entry_point} = {self.module} of {self.distribution})"

    def record(self, name: str) -> dict:
        """A run record's field: the object's name, module, distribution and entry point."""
        return {"name": name, "module": self.module, "distribution": self.distribution,
                "entry_point": self.entry_point}


def one_line(e: BaseException) -> str:
    """``SyntaxError: invalid syntax (toy_family.py, line 3)``: an exception's type and its message's first line."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def distribution(point: EntryPoint | None) -> str:
    """``name version`` of the distribution declaring ``point`` (None: cl-graft's own)."""
    if point is None:
        return f"cl-graft {version('cl-graft')}"
    dist = point.dist
    return "an unknown distribution" if dist is None else f"{dist.name} {dist.version}"


def points(group: str) -> list[EntryPoint]:
    """The entry points of ``group``, none of them loaded."""
    return list(entry_points(group=group))


def listing(group: str) -> str:
    """``toy (toy-family 0.1), other (other-pkg 1.0)``: the plugins of ``group`` by entry-point name and
    distribution, none loaded (empty when there are none)."""
    return ", ".join(f"{point.name} ({distribution(point)})" for point in points(group))


def load(point: EntryPoint, *, kind: str, pick: Callable[[Any], T | None], wanted: str) -> tuple[T, Origin]:
    """What the plugin ``point`` adds, and where it comes from.

    Args:
        point: an entry point of a plugin group.
        kind: what the group's plugins add, for messages (``stream family``, ``strategy``).
        pick: ``pick(loaded) -> what it adds``, or None when it holds nothing of the kind; ``loaded`` is the
            module the entry point names, or its ``module:attr`` object.
        wanted: what the entry point must name, for the message (``StreamFamily (a module defining FAMILY, or
            module:attr of one)``).

    Raises:
        UserError: the module cannot be imported (whatever it raises: ImportError, SyntaxError, RuntimeError...)
            or holds nothing of the kind; one line naming the plugin and its distribution.
    """
    where = f"{kind} plugin {point.name} = {point.value} (entry point group {point.group}, distribution " \
            f"{distribution(point)})"
    try:
        loaded = point.load()
    except Exception as e:
        raise UserError(f"{where} cannot be loaded: {one_line(e)}") from None
    found = pick(loaded)
    if found is None:
        raise UserError(f"{where} names no {wanted}")
    return found, Origin(module=point.value, distribution=distribution(point), entry_point=point.name)


def refuse_one_name_twice(named: Iterable[tuple[str, Origin]], *, kinds: str) -> None:
    """Refuses two objects with one name (``named``: each object's name and origin).

    Raises:
        UserError: ``two stream families are called 'digits': 'digits' (built in) and 'digits' (plugin toy = ...)``
            (``kinds``: ``stream families``), one line.
    """
    seen: dict[str, Origin] = {}
    for name, origin in named:
        if name in seen:
            raise UserError(f"two {kinds} are called {name!r}: {seen[name].describe(name)} and "
                            f"{origin.describe(name)}; one of them must be renamed or uninstalled")
        seen[name] = origin
