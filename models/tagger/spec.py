"""The BiLSTM tagger family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.tagger.config import TaggerConfig

SPEC = FamilySpec(
    name="tagger", config=TaggerConfig, module="corpusforge.models.tagger.model:Tagger", objective="tagging",
    doc="BiLSTM sequence labeller (POS tags, named entities) over word embeddings and a character CNN, with a "
        "softmax or a linear-chain CRF over the tags",
    trains_on="tagged", capabilities=frozenset({"tag"}),
    derived={"pad_id": ("pad",)},
)
