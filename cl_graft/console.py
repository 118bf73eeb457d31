"""What a command prints while it runs: one live progress line, one line per finished unit, then its table.

A command makes one :class:`Console` from its ``--quiet`` / ``--verbose`` flags and passes it to whatever reports
progress (no module-level state). Three levels:

- ``quiet``: nothing on standard output, no progress line; errors and warnings alone (on standard error).
- ``normal``: a live progress line on standard error while it runs, when that is a terminal (what runs, which
  phase, steps or rows done of how many, the phase's elapsed time and ETA, the command's elapsed time); when it
  is not (a log file, ``nohup``, CI), a plain line with the same facts about every minute instead, so a log shows
  the run is alive between its result lines; and on standard output the result lines (:meth:`Console.echo`: one
  per task as it ends, the final table).
- ``verbose``: the result lines, the libraries' own logs (Avalanche's ``InteractiveLogger`` with its progress
  bars, the inner progress bars of fine-tuning and localization) instead of the live line, and more detail
  (``cl-graft run``: each strategy's accuracy matrix): :attr:`Console.verbose` tells the callers.

Machines read the results files (``results.json`` and the others each command writes), not this text.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

import click
from tqdm.auto import tqdm

from .errors import UserError

LEVELS = ("quiet", "normal", "verbose")
_COUNTED = "{desc}: {percentage:3.0f}%|{bar:16}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}]{postfix}"
_UNCOUNTED = "{desc} [{elapsed}]{postfix}"
PLAIN_EVERY = 60.0
"""Seconds between the plain progress lines of a console without a live line."""


class Console:
    """One command's output: the live progress line (a single tqdm bar, re-labelled per phase) and its lines.

    Args:
        level: one of :data:`LEVELS`.
        out: where result lines go (default: standard output at the time of the call).
        live: show the progress line (default: at the normal level, when standard error is a terminal; verbose
            shows the libraries' own progress instead).
        err: where the progress line goes (default: standard error).
        every: at the normal level without the live line, seconds between plain progress lines on ``err``
            (0: none).
    """

    def __init__(self, level: str = "normal", *, out: TextIO | None = None, live: bool | None = None,
                 err: TextIO | None = None, every: float = PLAIN_EVERY) -> None:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        self.level = level
        self.out = out
        self.err = err if err is not None else sys.stderr
        self.live = (level == "normal" and self.err.isatty()) if live is None else live
        self.every = every if level == "normal" and not self.live else 0
        self._plain: dict | None = None                 # the phase the plain lines report
        self.started = time.perf_counter()
        self._bar: tqdm | None = None
        self._ticker: threading.Thread | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def from_flags(cls, *, quiet: bool, verbose: bool) -> Console:
        """The console of a command's ``--quiet`` / ``--verbose`` flags (both: a one-line error)."""
        if quiet and verbose:
            raise UserError("--quiet and --verbose exclude each other")
        return cls("quiet" if quiet else "verbose" if verbose else "normal")

    @property
    def quiet(self) -> bool:
        return self.level == "quiet"

    @property
    def verbose(self) -> bool:
        """Whether the libraries' own logs and inner progress bars should show (``--verbose``)."""
        return self.level == "verbose"

    def phase(self, label: str, total: int | None = None, unit: str = "steps") -> None:
        """Starts a phase on the progress line: ``label`` (e.g. ``graft · task 2/3 agnews · train``), counted to
        ``total`` ``unit`` (with a bar and an ETA) or, with ``total=None``, timed only."""
        if not self.live:
            if self.every:
                self._plain_phase(label, total, unit)
            return
        with self._lock:
            if self._bar is None:
                self._bar = tqdm(file=self.err, leave=False, dynamic_ncols=True, mininterval=0.2, delay=1e-9)
                self._ticker = threading.Thread(target=self._tick, daemon=True, name="console-progress")
                self._ticker.start()
            self._bar.set_description_str(label, refresh=False)
            self._bar.set_postfix_str(self._run_clock(), refresh=False)
            self._bar.bar_format = _COUNTED if total else _UNCOUNTED
            self._bar.unit = unit
            self._bar.reset(total=total or None)

    def advance(self, n: int = 1) -> None:
        """``n`` more steps or rows of the current phase done."""
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix_str(self._run_clock(), refresh=False)
                self._bar.update(n)
            if self._plain is not None:
                self._plain["n"] += n

    def echo(self, text: str = "") -> None:
        """A result line (or table) on standard output, above the progress line; nothing when quiet."""
        if self.quiet:
            return
        with self._lock:
            if self._bar is None:
                click.echo(text, file=self.out)
                return
            with self._bar.external_write_mode(file=self.err):
                click.echo(text, file=self.out)

    def close(self) -> None:
        """Removes the progress line (the command's output ends with its result lines)."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            self._plain = None
        if self._ticker is not None:
            self._stopped.set()
            self._ticker.join()
            self._ticker = None
            self._stopped.clear()

    def _plain_phase(self, label: str, total: int | None, unit: str) -> None:
        """Starts reporting ``label`` in the plain lines (and their clock, at the first phase)."""
        with self._lock:
            self._plain = {"label": label, "total": total, "unit": unit, "n": 0, "t0": time.perf_counter()}
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._plain_tick, daemon=True, name="console-plain")
                self._ticker.start()

    def _plain_tick(self) -> None:
        """Writes the plain progress line every :attr:`every` seconds: ``[run 0:12:00] graft · task 1/3 perm0 ·
        train: 120/500 steps (phase 0:45)``."""
        while not self._stopped.wait(self.every):
            with self._lock:
                if self._plain is not None:
                    p = self._plain
                    count = f": {p['n']}/{p['total']} {p['unit']}" if p["total"] else ""
                    click.echo(f"[{self._run_clock()}] {p['label']}{count} "
                               f"(phase {_clock(time.perf_counter() - p['t0'])})", file=self.err)

    def _tick(self) -> None:
        """Redraws the progress line every second, so that the clocks move in a phase with no steps."""
        while not self._stopped.wait(1.0):
            with self._lock:
                if self._bar is not None:
                    self._bar.set_postfix_str(self._run_clock(), refresh=False)
                    self._bar.refresh()

    def _run_clock(self) -> str:
        return f"run {_clock(time.perf_counter() - self.started)}"

    def __enter__(self) -> Console:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _clock(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour)."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"

