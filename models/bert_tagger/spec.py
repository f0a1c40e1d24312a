"""The BERT tagger family's declaration (corpusforge.models.family)."""

from corpusforge.models.bert_tagger.config import BertTaggerConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="bert_tagger", config=BertTaggerConfig, module="corpusforge.models.bert_tagger.model:BertTagger",
    objective="tagging",
    doc="BERT token classification: a pre-trained bert checkpoint's state of each word's first sub-word through a "
        "linear layer over the tags (tag.init)",
    trains_on="tagged", capabilities=frozenset({"tag"}),
    derived={"cls_id": ("cls",), "sep_id": ("sep",), "pad_id": ("pad",)},
    starts_from=frozenset({"bert", "bert_classifier", "bert_tagger", "sbert"}),
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
)
