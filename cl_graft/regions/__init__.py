"""Regions γ and how they are found: the :class:`~.region.Region` type and its files, the learned region of
Panigrahi et al. 2023 (Eq. 3, :mod:`.learned`), the registry of region methods (:mod:`.methods`), their shared
settings (:mod:`.config`) and the localization report (:mod:`.report`)."""
