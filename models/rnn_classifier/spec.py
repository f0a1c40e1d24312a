"""The recurrent classifier family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.rnn_classifier.config import RNNClassifierConfig

SPEC = FamilySpec(
    name="rnn_classifier", config=RNNClassifierConfig, module="corpusforge.models.rnn_classifier.model:RNNClassifier",
    objective="classification",
    doc="many-to-one LSTM/GRU classifier, optionally bidirectional and stacked (a BiLSTM), its embedding optionally "
        "from the project's word2vec/GloVe vectors",
    trains_on="labelled", capabilities=frozenset({"classify", "embed"}),
    derived={"pad_id": ("pad",)},
)
