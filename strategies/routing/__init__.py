"""Serving rows without task labels, for every method that keeps per-task model states (graft, PackNet):
:mod:`.states` switches a model between its tasks' states in place and routes rows (task-aware, by confidence, or
by θ_pre's features); :mod:`.features` keeps each task's feature statistics and their linear discriminant
(:mod:`.feature_store` saves them); :mod:`.class_heads` makes closed-form heads (the discriminant, RanPAC's
random-feature ridge) routers and chooses among them, and who answers a routed row, on dev rows; :mod:`.rules`
is what ``cl-graft run`` entries offer. It imports no method: the states it switches are read through the small
protocols of :mod:`.states`.
"""
