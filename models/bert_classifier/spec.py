"""The BERT classifier family's declaration (corpusforge.models.family)."""

from corpusforge.models.bert_classifier.config import BertClassifierConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="bert_classifier", config=BertClassifierConfig,
    module="corpusforge.models.bert_classifier.model:BertClassifier",
    objective="classification",
    doc="BERT's encoder with a linear classifier on the pooled [CLS] state (or mean/max pooling); fine-tunes a "
        "pre-trained bert checkpoint (classify.init) or trains from scratch",
    trains_on="labelled", capabilities=frozenset({"classify", "embed"}),
    derived={"cls_id": ("cls",), "sep_id": ("sep",), "pad_id": ("pad",)},
    starts_from=frozenset({"bert", "bert_classifier", "sbert"}),
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
    version=2,  # the body is a module of its own: weights named body.* (older checkpoints load, upgraded)
)
