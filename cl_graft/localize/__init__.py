"""``cl-graft localize``: the experiment (:mod:`.experiment`) and its table and figures (:mod:`.report`)."""
