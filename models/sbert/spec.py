"""The sentence encoder family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.sbert.config import SBertConfig

SPEC = FamilySpec(
    name="sbert", config=SBertConfig, module="corpusforge.models.sbert.model:SentenceEncoder",
    objective="contrastive",
    doc="Sentence-BERT: BERT's encoder pooled into one vector per sentence (mean, max or [CLS]), trained siamese on "
        "sentence pairs with in-batch negatives; starts from a pre-trained bert checkpoint or from scratch",
    trains_on="pairs", capabilities=frozenset({"embed"}),
    derived={"cls_id": ("cls",), "sep_id": ("sep",), "pad_id": ("pad",)},
    starts_from=frozenset({"bert", "sbert"}),
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
    version=2,  # the body is a module of its own: weights named body.* (older checkpoints load, upgraded)
)
