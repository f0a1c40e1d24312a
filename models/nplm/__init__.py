"""The NPLM family (Bengio et al. 2003). ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
