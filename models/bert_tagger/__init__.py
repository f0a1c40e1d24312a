"""BERT token classification (Devlin et al. 2019, figure 4d): a pre-trained BERT's states of each word's first
sub-word, through a linear layer over the tags. ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
