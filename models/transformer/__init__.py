"""The encoder-decoder Transformer family (Vaswani et al. 2017). ``config.py`` (torch-free), ``model.py``,
``spec.py``."""
