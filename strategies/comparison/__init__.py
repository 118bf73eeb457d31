"""The comparison harness behind ``cl-graft run``: the registry that finds every method's entries
(:mod:`.registry`), the runner (:mod:`.runner`), dev-only tuning (:mod:`.tuning`), continual metrics from an
accuracy matrix (:mod:`.metrics`), the progress line (:mod:`.progress`) and tables and figures
(:mod:`.report`). It reads the methods through their entries (:mod:`cl_graft.strategies.interface`) and
imports no method."""
