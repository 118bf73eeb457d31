"""Avalanche plugins every strategy of the comparison may use, below the methods: the single-task fine-tuning
recipe every strategy trains with (:mod:`.recipe`) and SI with copied weight snapshots
(:mod:`.synaptic_intelligence`, the ``si`` baseline's)."""
