"""The recurrent family: Elman RNN, LSTM and GRU language models. ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
