"""Surgical fine-tuning (Lodha et al. 2023, https://aclanthology.org/2023.findings-emnlp.204): FIM layer scores
(:mod:`.fisher`), fine-tuning only the top-ranked layers (:mod:`.finetune`) and the comparison table behind
``cl-graft surgical`` (:mod:`.report`)."""
