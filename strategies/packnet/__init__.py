"""PackNet (Mallya & Lazebnik 2018, https://arxiv.org/abs/1711.05769) on any model: a method of its own that
sits above graft (``cl_graft.layers``) because it is built on graft's owner map.

- :mod:`.plugin`: :class:`~.plugin.PackNetPlugin`, a :class:`~cl_graft.strategies.graft.plugin.GraftPlugin`
  whose task keeps its largest free weights instead of a learned region;
- :mod:`.entry`: its entries in ``cl-graft run`` (``packnet``, ``packnet-zero``), declared here
  (:data:`ENTRIES`, found by the harness's registry); it stores, routes and reports as graft does.
"""
from .entry import ENTRIES

__all__ = ["ENTRIES"]
