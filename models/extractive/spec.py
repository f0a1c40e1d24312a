"""The extractive summarizer family's declaration (corpusforge.models.family)."""

from corpusforge.models.extractive.config import ExtractiveConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="extractive", config=ExtractiveConfig, module="corpusforge.models.extractive.model:Extractive",
    objective="extractive",
    doc="an extractive summarizer (SummaRuNNer-style, Nallapati et al. 2017): a BiLSTM reads each sentence, a second "
        "BiLSTM reads the document's sentence vectors, and each sentence gets a score; the summary is the top ones",
    trains_on="pairs", capabilities=frozenset({"extract"}),
    derived={"pad_id": ("pad",)},
    role_tokens={"pad": "<pad>"},
)
