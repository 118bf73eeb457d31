"""The comparison harness behind ``cl-graft run``: the strategy registry with each strategy's settings
(:mod:`.registry`), the shared settings (:mod:`.config`), the runner (:mod:`.runner`), dev-only tuning
(:mod:`.tuning`), continual metrics from an accuracy matrix (:mod:`.metrics`) and tables and figures
(:mod:`.report`)."""
