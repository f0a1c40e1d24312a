"""BERT (Devlin et al. 2019) as the texts teach it: WordPiece input ``[CLS] A [SEP] B [SEP]`` with segment
embeddings, a bidirectional Transformer encoder, pre-trained on masked tokens (15%, 80/10/10) and next-sentence
prediction (50% IsNext, 50% a random sentence). ``config.py`` (torch-free), ``model.py``, ``spec.py``; the
objective is corpusforge.models.objectives.BertPretraining. Fine-tuning it is the bert_classifier family."""
