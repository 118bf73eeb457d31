"""Avalanche's baselines in ``cl-graft run``, each an entry that owns its settings and grid, its builder, the
scenarios it serves and the bytes it keeps (:data:`ENTRIES`, collected by
:mod:`cl_graft.strategies.comparison.registry`).

- :mod:`.entries`: the entries (``si``, ``gem``, ``agem``, ``cumulative``, ``er-ace``, ``der``, ``icarl``,
  ``bic``);
- :mod:`.settings`: their settings classes and ``--tune`` grids;
- :mod:`.build`: how each is built from a ``BuildContext``;
- :mod:`.scenario`: the refusals of a stream a method cannot serve (the model of each scenario is the
  harness's, :mod:`..interface.scenario`);
- :mod:`.kept`: the bytes each keeps beyond the model it starts from.
"""
from .entries import ENTRIES

__all__ = ["ENTRIES"]
