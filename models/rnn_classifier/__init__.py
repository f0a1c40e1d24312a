"""Many-to-one recurrent classifiers (the texts' sentiment RNN): an LSTM or GRU reads the text and one vector of it,
the last hidden state (both directions' for a bidirectional RNN) or the max/mean of its outputs, goes to a linear
layer over the classes. ``config.py`` (torch-free), ``model.py``, ``spec.py``; its embedding can start from the
project's own word2vec/GloVe vectors (``classify.embeddings``)."""
