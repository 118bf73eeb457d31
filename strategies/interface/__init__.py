"""What every method of ``cl-graft run`` implements, below the methods and the harness (``cl_graft.layers``).

- :mod:`.entry`: :class:`~.entry.StrategyEntry`, the one object a method declares (its build, its bytes, its
  capabilities), with :class:`~.entry.BuildContext` (what its builder gets) and the bytes helpers;
- :mod:`.settings`: the base of a method's own settings class (one ``cl-graft run`` option per field);
- :mod:`.config`: the settings every strategy shares (one optimizer recipe for all);
- :mod:`.scenario`: the model every strategy starts from in a scenario (task or class incremental);
- :mod:`.registration`: how a method's folder declares its entries (``ENTRIES``) and how the harness finds
  them.

A method's folder (one per method, ``cl_graft.layers`` lists them) imports this room and never the harness
(``comparison/``); the harness imports this room and never a method: it finds the methods' entries by
discovery (:mod:`cl_graft.strategies.comparison.registry`).
"""
