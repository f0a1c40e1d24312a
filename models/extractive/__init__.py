"""The extractive summarizer family: a hierarchical BiLSTM that scores a document's sentences."""
