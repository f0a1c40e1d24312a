"""The RNN encoder-decoder (corpusforge.models.seq2seq), the Seq2Seq objective, and the encoder-decoder families'
registration."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models import decoding
from corpusforge.models.family import families
from corpusforge.models.objectives import IGNORE, Seq2Seq, Seq2SeqLoss, Seq2SeqSettings
from corpusforge.models.objectives.seq2seq import seq2seq
from corpusforge.models.seq2seq.config import Seq2SeqConfig
from corpusforge.models.seq2seq.model import RNNSeq2Seq
from corpusforge.models.training import train
from corpusforge.models.transformer.model import Transformer
from corpusforge.models.zoo import build_model, load_model, objective_for, save_model
from tests.models.seq2seq_fixtures import (
    BOS,
    EOS,
    IDS,
    PAD,
    exact_match,
    held_out_batch,
    rnn_config,
    splits,
    train_config,
    trained_rnn,
    transformer_config,
)

VARIANTS = [(a, c) for a in ("none", "bahdanau", "luong-dot", "luong-general") for c in ("gru", "lstm")]


def padded_batch(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Three sources of lengths 7, 4 and 1 (padded to 7) and targets of 5 tokens."""
    src = torch.randint(3, 13, (3, 7), generator=gen)
    src_mask = torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]])
    src[~src_mask] = PAD
    tgt_in = torch.cat([torch.full((3, 1), BOS), torch.randint(3, 13, (3, 4), generator=gen)], dim=1)
    return src, src_mask, tgt_in, torch.ones_like(tgt_in, dtype=torch.bool)


def small(attention: str, cell: str, **kw) -> RNNSeq2Seq:
    torch.manual_seed(0)
    return RNNSeq2Seq(rnn_config(**{"attention": attention, "cell": cell, "n_embd": 8, "n_hidden": 8, "n_layer": 2,
                                    **kw})).eval()


@pytest.mark.learns
def test_the_attention_rnn_learns_to_reverse_digits():
    """Bahdanau attention, trained through models.training.train with the Seq2Seq objective: >= 95% of held-out
    sequences reversed exactly by greedy decoding."""
    src, src_mask, references = held_out_batch()
    hypotheses = decoding.greedy(trained_rnn(), src, src_mask, BOS, EOS)
    assert exact_match(hypotheses, references) >= 0.95


@pytest.mark.parametrize("attention,cell", VARIANTS)
def test_padding_is_invisible(attention, cell):
    """Packed sequences and the attention mask: changing a padded source id, or padding every source further,
    changes no logit (the encoder never reads padding; attention gives it zero weight)."""
    model = small(attention, cell)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(src, src_mask, tgt_in, tgt_mask)
        changed = src.clone()
        changed[~src_mask] = 11  # a real digit's id where padding was
        assert torch.equal(model(changed, src_mask, tgt_in, tgt_mask), logits)
        wider = torch.nn.functional.pad(src, (0, 3), value=PAD), torch.nn.functional.pad(src_mask, (0, 3), value=False)
        assert torch.allclose(model(*wider, tgt_in, tgt_mask), logits, atol=1e-6)
        unmasked = model(src, torch.ones_like(src_mask), tgt_in, tgt_mask)  # the mask is what hides it
        assert not torch.allclose(unmasked[1:], logits[1:], atol=1e-4)


@pytest.mark.parametrize("attention,cell", VARIANTS)
def test_decoding_step_by_step_gives_the_teacher_forced_logits(attention, cell):
    """decode_step with its carried state, and with the whole prefix read again (cache=None), gives forward's
    logits at every position."""
    model = small(attention, cell)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(src, src_mask, tgt_in, tgt_mask)
        memory, cache = model.encode(src, src_mask), None
        for t in range(tgt_in.shape[1]):
            step, cache, _ = model.decode_step(memory, src_mask, tgt_in[:, : t + 1], cache)
            again, _, _ = model.decode_step(memory, src_mask, tgt_in[:, : t + 1], None)
            assert torch.allclose(step, logits[:, t], atol=1e-6) and torch.allclose(again, logits[:, t], atol=1e-6)


@pytest.mark.parametrize("attention", ["bahdanau", "luong-dot", "luong-general"])
def test_attention_maps_are_distributions_over_the_real_source(attention):
    model = small(attention, "gru")
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, weights = model(src, src_mask, tgt_in, tgt_mask, return_attention=True)
    assert torch.equal(logits, model(src, src_mask, tgt_in, tgt_mask))
    assert weights.shape == (3, 5, 7)  # (B, T_tgt, T_src)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    assert (weights.masked_select(~src_mask[:, None, :].expand_as(weights)) == 0).all()
    assert torch.equal(weights[2, :, 0], torch.ones(5))  # a one-token source: all weight on it
    assert small("none", "gru")(src, src_mask, tgt_in, tgt_mask, return_attention=True)[1] is None


@pytest.mark.learns
def test_the_trained_attention_reads_the_source_backwards_and_the_heatmap_is_drawn(tmp_path):
    """Reversing, target step t attends most to source position n-1-t: the anti-diagonal the texts draw."""
    model = trained_rnn()
    src, src_mask, _ = held_out_batch(20)
    tokens, maps = decoding.greedy(model, src, src_mask, BOS, EOS, return_attention=True)
    hits = total = 0
    for row, (out, weights) in enumerate(zip(tokens, maps)):
        n = int(src_mask[row].sum())
        assert weights.shape == (len(out) + 1, 1, n)  # the eos step included, the real source only
        for t in range(min(n, len(out))):
            hits += int(weights[t, 0].argmax()) == n - 1 - t
            total += 1
    assert hits / total >= 0.9
    digits = [str(i - 3) for i in src[0, : maps[0].shape[2]].tolist()]
    path = decoding.plot_alignment(maps[0][:, 0], digits, [str(i - 3) for i in tokens[0]] + ["</s>"],
                                   tmp_path / "alignment.png", title="reversal")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_teacher_forcing_below_one_feeds_the_models_own_guesses_reproducibly():
    """ratio 0: every step after the first reads the model's own greedy guess (the logits then follow greedy
    decoding, not the given target); the draws come from torch's global generator; ratio 1 draws nothing."""
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(4))
    model = small("bahdanau", "gru", teacher_forcing=0.0)
    model.train()
    with torch.no_grad():
        own = model(src, src_mask, tgt_in, tgt_mask)
        guesses = torch.cat([tgt_in[:, :1], own.argmax(-1)[:, :-1]], dim=1)
        model.eval()
        assert torch.allclose(own, model(src, src_mask, guesses, tgt_mask), atol=1e-6)
        assert not torch.allclose(own, model(src, src_mask, tgt_in, tgt_mask), atol=1e-4)

    half = small("bahdanau", "gru", teacher_forcing=0.5).train()
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        with torch.no_grad():
            runs.append(half(src, src_mask, tgt_in, tgt_mask))
    assert torch.equal(runs[0], runs[1])
    always = small("bahdanau", "gru").train()
    state = torch.get_rng_state()
    always(src, src_mask, tgt_in, tgt_mask)  # ratio 1.0, no dropout: no draw
    assert torch.equal(torch.get_rng_state(), state)


def test_the_bridge_starts_the_decoder_from_both_directions_final_states():
    """The backward direction's final state is the one at the source's first token: with attention off the
    decoder depends on the source only through the bridge and the summary, and both see the first token."""
    model = small("none", "lstm", n_layer=1)
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(5))
    memory = model.encode(src, src_mask)
    assert memory.h0.shape == (3, 1, 16) and memory.c0.shape == (3, 1, 16) and memory.summary.shape == (3, 16)
    outputs = memory.outputs
    forward_last = outputs[torch.arange(3), src_mask.sum(1) - 1, :8]  # the forward direction at each real end
    backward_first = outputs[:, 0, 8:]
    torch.testing.assert_close(memory.summary, torch.cat([forward_last, backward_first], dim=1))
    torch.testing.assert_close(memory.h0[:, 0], torch.tanh(model.bridge(memory.summary)))


def test_a_luong_dot_decoder_must_be_as_wide_as_the_encoder_outputs():
    with pytest.raises(ValueError, match="luong-dot"):
        Seq2SeqConfig(**IDS, attention="luong-dot", n_hidden=8, dec_hidden=12)
    assert Seq2SeqConfig(**IDS, attention="luong-general", n_hidden=8, dec_hidden=12).decoder_width == 12
    with pytest.raises(ValueError, match="teacher_forcing"):
        Seq2SeqConfig(**IDS, teacher_forcing=1.5)
    with pytest.raises(ValueError, match="eos_id"):
        Seq2SeqConfig(**{**IDS, "eos_id": 13})


# --- the objective ------------------------------------------------------------------------------------------

def test_pairs_become_teacher_forced_batches_with_padding_ignored():
    pairs = {"train": ([[5, 6, 7], [8]], [[9, 10], [11, 12, 3, 4]])}
    objective = Seq2Seq(pairs, PAD, BOS, EOS, max_len=4)
    src, src_mask, tgt_in, tgt_mask, target = objective.collate(*pairs["train"])
    assert src.tolist() == [[5, 6, 7], [8, PAD, PAD]] and src_mask.sum(1).tolist() == [3, 1]
    assert tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 3]]
    assert target.tolist() == [[9, 10, EOS, IGNORE], [11, 12, 3, 4]]  # cut by max_len: it did not end there
    assert tgt_mask.tolist() == [[True, True, True, False], [True] * 4]
    objective.setup(None, batch_size=2)
    batch = objective.batch(0, torch.Generator())
    assert batch.tokens == 7 and len(batch.tensors) == 5  # real target tokens only
    with pytest.raises(ValueError, match="pad, bos and eos"):
        Seq2Seq(pairs, PAD, None, EOS)
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        Seq2Seq({"train": ([[1], [2]], [[3]])}, PAD, BOS, EOS)


def test_the_loss_is_label_smoothed_cross_entropy_over_real_target_tokens():
    torch.manual_seed(0)
    model = Transformer(transformer_config(n_enc_layer=1, n_dec_layer=1)).eval()
    objective = seq2seq(model.cfg, splits(), Seq2SeqSettings(label_smoothing=0.1))
    objective.setup(model, batch_size=8)
    src, src_mask, tgt_in, tgt_mask, target = objective.batch(3, torch.Generator()).tensors
    loss, _ = objective.loss_module(model)(src, src_mask, tgt_in, tgt_mask, target)
    logp = torch.log_softmax(model(src, src_mask, tgt_in, tgt_mask), dim=-1)[tgt_mask]
    nll = -logp.gather(1, target[tgt_mask][:, None]).squeeze(1)
    expected = (0.9 * nll - 0.1 * logp.mean(-1)).mean()  # smoothing spreads 0.1 uniformly over the vocabulary
    torch.testing.assert_close(loss, expected)
    assert isinstance(objective.loss_module(model), Seq2SeqLoss) and objective.label_smoothing == 0.1
    assert seq2seq(model.cfg, splits()).label_smoothing == 0.0  # the kind's default
    scores = objective.evaluate(model, "valid", batch_size=32)
    assert set(scores) == {"loss", "ppl"} and scores["ppl"] == pytest.approx(torch.tensor(scores["loss"]).exp().item())


def test_training_resumes_exactly_with_teacher_forcing_and_dropout(tmp_path):
    """Stopped at step 13 and resumed, a run ends with the same weights bit for bit as one never stopped: the
    batches come by number, and the teacher-forcing draws and dropout from the trainer's saved generators."""
    cfg = rnn_config(teacher_forcing=0.5, dropout=0.2, n_embd=16, n_hidden=16)
    short = {"train": (splits()["train"][0][:400], splits()["train"][1][:400]), "valid": splits()["valid"]}
    tcfg = train_config(max_iters=25, batch_size=16, lr=3e-3, eval_interval=10, eval_iters=2, log_interval=5, seed=3)

    def run(**kwargs):
        torch.manual_seed(0)
        model = RNNSeq2Seq(cfg)
        train(model, seq2seq(cfg, short), tcfg, **kwargs)
        return model

    whole = run()
    ckpt = tmp_path / "c.safetensors"
    run(checkpoint_path=ckpt, stop_after=13)
    resumed = run(checkpoint_path=ckpt, resume_from=ckpt)
    for name, tensor in whole.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name


# --- the families -------------------------------------------------------------------------------------------

def test_both_encoder_decoder_families_are_registered_and_round_trip(tmp_path):
    specs = families()
    for name, cls in (("seq2seq", RNNSeq2Seq), ("transformer", Transformer)):
        spec = specs[name]
        assert spec.trains_on == "pairs" and spec.can("translate") and spec.can("attention_maps")
        assert spec.objective == "seq2seq"
        assert set(spec.derived) == {"pad_id", "bos_id", "eos_id"} and spec.module_class() is cls
        assert "derived" in spec.config.__dataclass_fields__["vocab_size"].metadata
    src, src_mask, tgt_in, tgt_mask = padded_batch(torch.Generator().manual_seed(6))
    for name, cfg in (("seq2seq", {**IDS, "n_embd": 8, "n_hidden": 8, "cell": "lstm"}),
                      ("transformer", {**IDS, "d_model": 16, "n_head": 2, "n_enc_layer": 1, "n_dec_layer": 1,
                                       "d_ff": 32, "share_embeddings": False})):
        model = build_model(name, cfg).eval()
        assert isinstance(objective_for(model, splits()), Seq2Seq)
        save_model(model, tmp_path / name)
        loaded = load_model(tmp_path / name)
        assert torch.equal(loaded(src, src_mask, tgt_in, tgt_mask), model(src, src_mask, tgt_in, tgt_mask))
