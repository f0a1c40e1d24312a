"""The RNN encoder-decoder family (seq2seq): a bidirectional GRU/LSTM encoder, a decoder with no attention (the
fixed-vector bottleneck), Bahdanau's additive or Luong's dot/general attention. ``config.py`` (torch-free),
``model.py``, ``spec.py``."""
