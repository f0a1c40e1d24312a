"""The masked encoder family: GPT's blocks without the causal mask, trained on masked tokens (BERT's objective).
``config.py`` (torch-free), ``model.py``, ``spec.py``."""
