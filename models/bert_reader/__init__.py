"""BERT for extractive question answering (Devlin et al. 2019, figure 4c, SQuAD): ``[CLS] question [SEP] passage
[SEP]`` through a pre-trained BERT, a start and an end score at every token; the answer is the passage span with the
best start + end. ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
