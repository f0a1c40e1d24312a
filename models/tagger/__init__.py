"""Sequence labelling (part-of-speech tags, named entities): a BiLSTM over word embeddings and character features
(a character CNN, as Ma & Hovy 2016), with a softmax over the tags at each word or a linear-chain CRF over the
whole sentence (corpusforge.models.crf). ``config.py`` (torch-free), ``model.py``, ``spec.py``."""
