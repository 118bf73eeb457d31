"""Regions γ and how they are found: the :class:`~.region.Region` type and its files (:mod:`.io`), the
learned region of Panigrahi et al. 2023 (Eq. 3, :mod:`.learned`), the registry of region methods
(:mod:`.methods`), their shared settings (:mod:`.config`), the Fisher information (:mod:`.fisher`) and
training inside a region (graft re-training, BitFit: :mod:`.finetune`). The ``localize`` command's experiment
is :mod:`cl_graft.localize`'s."""
