"""Models and training: the text classifier and its heads (:mod:`.models`, :mod:`.prompts`), fine-tuning and
evaluation (:mod:`.finetune`, :mod:`.evaluate`), multi-task training (:mod:`.multitask`), bit-exact freezing of
parameter elements (:mod:`.freeze`) and training inside a region: graft re-training, BitFit
(:mod:`.region_training`)."""
