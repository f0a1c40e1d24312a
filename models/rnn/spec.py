"""The recurrent family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.rnn.config import RNNConfig

SPEC = FamilySpec(
    name="rnn", config=RNNConfig, module="corpusforge.models.rnn.model:RNNLM",
    objective="truncated_bptt",
    doc="Elman RNN, LSTM or GRU (see model.cell) trained on contiguous streams, truncated BPTT",
    capabilities=frozenset({"generate"}), recurrent=True,
    objectives=frozenset({"causal_lm"}),  # random windows, each read from a fresh state (no state carried)
)
