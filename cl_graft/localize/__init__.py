"""The ``cl-graft localize`` command's experiment (:mod:`.experiment`) and its table and figures (:mod:`.report`)."""
