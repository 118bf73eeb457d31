"""The comparison harness behind ``cl-graft run``: the interface each method's entry implements (:mod:`.entry`, its
settings base :mod:`.settings`, the shared settings :mod:`.config`), the registry that collects the entries
(:mod:`.registry`), the runner (:mod:`.runner`), dev-only tuning (:mod:`.tuning`), continual metrics from an
accuracy matrix (:mod:`.metrics`) and tables and figures (:mod:`.report`)."""
