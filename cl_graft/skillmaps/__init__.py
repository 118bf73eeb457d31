"""Multi-task skill maps (Panigrahi et al. 2023, §5.1): the experiment (:mod:`.experiment`), overlap, transfer
and composition as numpy functions (:mod:`.analysis`), the results file (:mod:`.results`) and its figures and text
(:mod:`.report`)."""
