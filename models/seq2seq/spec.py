"""The RNN encoder-decoder family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.seq2seq.config import Seq2SeqConfig

SPEC = FamilySpec(
    name="seq2seq", config=Seq2SeqConfig, module="corpusforge.models.seq2seq.model:RNNSeq2Seq",
    objective="seq2seq",
    objectives=frozenset({"denoising"}),  # BART's pre-training on plain text (the seq2seq stage's task: denoise)
    doc="RNN encoder-decoder (GRU or LSTM, bidirectional encoder) without attention, or with Bahdanau or Luong "
        "attention (model.attention), trained on source-target pairs",
    trains_on="pairs",
    capabilities=frozenset({"translate", "attention_maps"}),
    derived={"pad_id": ("pad",), "bos_id": ("bos",), "eos_id": ("eos",)},
    role_tokens={"pad": "<pad>", "bos": "<s>", "eos": "</s>"},
)
