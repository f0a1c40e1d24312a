"""The toy translation task of the encoder-decoder tests: reverse a digit sequence (length 4-8, 10 digits plus
pad/bos/eos), and the two models trained on it through the one trainer, each trained once per test process."""

from __future__ import annotations

import functools

import numpy as np
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.objectives import Seq2Seq
from corpusforge.models.objectives.seq2seq import seq2seq
from corpusforge.models.seq2seq.config import Seq2SeqConfig
from corpusforge.models.seq2seq.model import RNNSeq2Seq
from corpusforge.models.training import train
from corpusforge.models.transformer.config import TransformerConfig
from corpusforge.models.transformer.model import Transformer

PAD, BOS, EOS = 0, 1, 2
VOCAB = 13  # pad, bos, eos and the digits 0-9 as ids 3-12
IDS = {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "vocab_size": VOCAB}


def reversal(n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` random digit sequences of length 4-8 and their reversals."""
    gen = np.random.default_rng(seed)
    sources = [[int(d) for d in gen.integers(3, 13, gen.integers(4, 9))] for _ in range(n)]
    return sources, [s[::-1] for s in sources]


def unseen(pairs, seen: set[tuple[int, ...]]) -> tuple[list[list[int]], list[list[int]]]:
    kept = [(s, t) for s, t in zip(*pairs) if tuple(s) not in seen]
    return [s for s, _ in kept], [t for _, t in kept]


TRAIN = reversal(10000, 0)
VALID = reversal(200, 1)
HELD_OUT = unseen(reversal(240, 2), {tuple(s) for s in TRAIN[0]})  # never trained on (a short one may repeat)


def splits() -> dict[str, tuple[list[list[int]], list[list[int]]]]:
    return {"train": TRAIN, "valid": VALID}


def rnn_config(**overrides) -> Seq2SeqConfig:
    return Seq2SeqConfig(**{**IDS, "n_embd": 32, "n_hidden": 64, "attention": "bahdanau", "max_len": 16, **overrides})


def transformer_config(**overrides) -> TransformerConfig:
    return TransformerConfig(**{**IDS, "d_model": 64, "n_head": 2, "n_enc_layer": 2, "n_dec_layer": 2, "d_ff": 128,
                                "dropout": 0.0, "max_len": 16, **overrides})


def train_config(**overrides) -> TrainConfig:
    return TrainConfig(**{"batch_size": 64, "warmup_iters": 20, "weight_decay": 0.0, "eval_iters": 0,
                          "log_interval": 50, "device": "cpu", "cpu_threads": 1, **overrides})


def fit(model: torch.nn.Module, steps: int, lr: float, **train_overrides) -> torch.nn.Module:
    objective = seq2seq(model.cfg, splits())
    train(model, objective, train_config(max_iters=steps, lr=lr, min_lr=lr / 10, eval_interval=steps, **train_overrides))
    return model.eval()


@functools.lru_cache(maxsize=None)
def trained_rnn() -> RNNSeq2Seq:
    """A Bahdanau-attention GRU after 200 steps (~8 s on one core): >= 99% exact reversals."""
    torch.manual_seed(0)
    return fit(RNNSeq2Seq(rnn_config()), steps=200, lr=3e-3)


@functools.lru_cache(maxsize=None)
def trained_transformer() -> Transformer:
    """A 2+2-layer post-LN Transformer after 500 steps (~13 s on one core): >= 99% exact reversals."""
    torch.manual_seed(0)
    return fit(Transformer(transformer_config()), steps=500, lr=2e-3, beta2=0.98)


def held_out_batch(n: int = 200) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """(src, src_mask, reference targets) of the held-out sequences (never trained or validated on)."""
    sources, targets = HELD_OUT[0][:n], HELD_OUT[1][:n]
    src, src_mask, *_ = Seq2Seq({"train": (sources, targets)}, PAD, BOS, EOS).collate(sources, targets)
    return src, src_mask, targets


def exact_match(hypotheses: list[list[int]], references: list[list[int]]) -> float:
    return float(np.mean([h == r for h, r in zip(hypotheses, references)]))
