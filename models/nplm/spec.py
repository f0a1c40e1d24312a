"""The NPLM family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.nplm.config import NPLMConfig

SPEC = FamilySpec(
    name="nplm", config=NPLMConfig, module="corpusforge.models.nplm.model:NPLM",
    objective="causal_lm",
    doc="Bengio et al. 2003: a fixed window of embeddings, a tanh layer, a softmax",
    capabilities=frozenset({"generate"}),
    # the context before a sequence's first token: the tokenizer's padding token, else its end-of-text token
    # (what precedes a document in the token stream)
    derived={"pad_id": ("pad", "eot")},
    version=2,  # 2: no padding row of its own past the vocabulary; the tokenizer's pad (else eot) id pads the context
)
