"""The GPT family: a decoder-only Transformer (nanoGPT's shape). ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
