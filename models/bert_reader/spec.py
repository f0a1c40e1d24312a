"""The BERT reader family's declaration (corpusforge.models.family)."""

from corpusforge.models.bert_reader.config import BertReaderConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="bert_reader", config=BertReaderConfig, module="corpusforge.models.bert_reader.model:BertReader",
    objective="span",
    doc="BERT extractive question answering: [CLS] question [SEP] passage [SEP] through a pre-trained bert "
        "checkpoint (qa.init), a start and an end score per token; the answer is the best-scoring passage span",
    trains_on="spans", capabilities=frozenset({"answer"}),
    derived={"cls_id": ("cls",), "sep_id": ("sep",), "pad_id": ("pad",)},
    starts_from=frozenset({"bert", "bert_classifier", "bert_tagger", "bert_reader", "sbert"}),
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
)
