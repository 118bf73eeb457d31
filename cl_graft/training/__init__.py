"""Models and training: the text classifier and its heads (:mod:`.models`, :mod:`.prompts`), fine-tuning
and evaluation (:mod:`.finetune`, :mod:`.evaluate`), multi-task training (:mod:`.multitask`) and bit-exact
freezing of parameter elements (:mod:`.freeze`). Training inside a region (graft re-training, BitFit) is
:mod:`cl_graft.regions.finetune`'s: nothing here imports regions."""
