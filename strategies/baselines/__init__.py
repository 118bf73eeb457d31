"""Avalanche's baselines in ``cl-graft run``, one module per baseline (``ewc.py``, ``replay.py``,
``icarl.py``..., named as the strategy with ``_`` for ``-``): each holds its settings class and ``--tune``
grid, its builder, the bytes it keeps, the scenarios it serves and the streams it refuses, and defines
``ENTRY`` (:class:`~..interface.entry.StrategyEntry`). What several share is :mod:`.common`.

:data:`ENTRIES` is every module's entry (:func:`~..interface.registration.package_entries`), read by the
harness's registry: a new baseline is one module here, nothing else edited.
"""
from ..interface.registration import package_entries

ENTRIES = package_entries(__name__, __path__)

__all__ = ["ENTRIES"]
