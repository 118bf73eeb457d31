"""Avalanche plugins beside the method: PackNet on a transformer (:mod:`.packnet`) and the single-task
fine-tuning recipe every strategy of the comparison trains with (:mod:`.recipe`)."""
