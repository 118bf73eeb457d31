"""Surgical fine-tuning (Lodha et al. 2023, https://aclanthology.org/2023.findings-emnlp.204): fine-tuning only
the top-ranked layers (:mod:`.finetune`; the FIM layer scores are :mod:`cl_graft.regions.fisher`'s), the
comparison behind ``cl-graft surgical`` (:mod:`.experiment`) and its table and figures (:mod:`.report`)."""
