"""Sentence-BERT (Reimers and Gurevych 2019): BERT's encoder whose token states are pooled (mean, max or [CLS]) into
one vector per sentence, trained siamese on sentence pairs so that cosine similarity finds the sentences that belong
together. ``config.py`` (torch-free), ``model.py``, ``spec.py``; the objective is
corpusforge.models.objectives.Contrastive (in-batch negatives)."""
