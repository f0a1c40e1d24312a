"""Recurrent models: our cells against hand computations in float64 and against torch's fused modules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from corpusforge.models.rnn.config import RNNConfig
from corpusforge.models.rnn.model import (
    RNNLM,
    ElmanCell,
    GRUCell,
    LSTMCell,
    OurRecurrentStack,
    RNNEncoder,
    copy_fused_to_ours,
    fused_stack,
)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_elman_cell_on_the_cat_sat_mat_example():
    # 004_*: W_hh = 0.5 I, W_xh = I, b = 0, h0 = 0, x1 = [0.2, 0.8], x2 = [0.5, 0.1]
    cell = ElmanCell(2, 2).double()
    with torch.no_grad():
        cell.U.weight.copy_(torch.eye(2))
        cell.U.bias.zero_()
        cell.W.weight.copy_(0.5 * torch.eye(2))
    h1 = cell(torch.tensor([0.2, 0.8], dtype=torch.float64), torch.zeros(2, dtype=torch.float64))
    assert h1.tolist() == pytest.approx([math.tanh(0.2), math.tanh(0.8)], abs=1e-12)
    assert h1.tolist() == pytest.approx([0.1974, 0.6640], abs=1e-4)
    h2 = cell(torch.tensor([0.5, 0.1], dtype=torch.float64), h1)
    expected = [math.tanh(0.5 * math.tanh(0.2) + 0.5), math.tanh(0.5 * math.tanh(0.8) + 0.1)]
    assert h2.tolist() == pytest.approx(expected, abs=1e-12)  # ~[0.5361, 0.4070]; the text rounds to 0.537


def test_lstm_cell_gates_by_hand():
    rng = np.random.default_rng(0)
    n_in, H = 3, 2
    Ws = {g: rng.normal(size=(H, H + n_in)) for g in "fiCo"}
    bs = {g: rng.normal(size=H) for g in "fiCo"}
    x, h, C = rng.normal(size=n_in), rng.normal(size=H), rng.normal(size=H)
    hx = np.concatenate([h, x])
    f, i, o = (sigmoid(Ws[g] @ hx + bs[g]) for g in "fio")
    C_new = f * C + i * np.tanh(Ws["C"] @ hx + bs["C"])
    h_new = o * np.tanh(C_new)
    cell = LSTMCell(n_in, H).double()
    with torch.no_grad():
        for g, lin in zip("fiCo", (cell.W_f, cell.W_i, cell.W_C, cell.W_o)):
            lin.weight.copy_(torch.tensor(Ws[g]))
            lin.bias.copy_(torch.tensor(bs[g]))
    got_h, got_C = cell(torch.tensor(x), (torch.tensor(h), torch.tensor(C)))
    np.testing.assert_allclose(got_h.detach().numpy(), h_new, atol=1e-12)
    np.testing.assert_allclose(got_C.detach().numpy(), C_new, atol=1e-12)


@pytest.mark.parametrize("reset", ["before", "after"])
def test_gru_cell_by_hand(reset):
    rng = np.random.default_rng(1)
    n_in, H = 3, 2
    U = {g: rng.normal(size=(H, n_in)) for g in "rzh"}
    W = {g: rng.normal(size=(H, H)) for g in "rzh"}
    bU = {g: rng.normal(size=H) for g in "rzh"}
    bW = {g: rng.normal(size=H) for g in "rzh"}
    x, h = rng.normal(size=n_in), rng.normal(size=H)
    r = sigmoid(U["r"] @ x + bU["r"] + W["r"] @ h + bW["r"])
    z = sigmoid(U["z"] @ x + bU["z"] + W["z"] @ h + bW["z"])
    if reset == "before":  # textbook (Cho 2014)
        h_tilde = np.tanh(U["h"] @ x + bU["h"] + W["h"] @ (r * h) + bW["h"])
    else:  # torch / cuDNN
        h_tilde = np.tanh(U["h"] @ x + bU["h"] + r * (W["h"] @ h + bW["h"]))
    expected = z * h + (1 - z) * h_tilde
    cell = GRUCell(n_in, H, reset=reset).double()
    with torch.no_grad():
        for g, (u, w) in zip("rzh", ((cell.U_r, cell.W_r), (cell.U_z, cell.W_z), (cell.U, cell.W))):
            u.weight.copy_(torch.tensor(U[g]))
            u.bias.copy_(torch.tensor(bU[g]))
            w.weight.copy_(torch.tensor(W[g]))
            w.bias.copy_(torch.tensor(bW[g]))
    np.testing.assert_allclose(cell(torch.tensor(x), torch.tensor(h)).detach().numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_our_stack_agrees_with_torch_fused(kind, bidirectional):
    torch.manual_seed(0)
    fused = fused_stack(kind, 5, 4, n_layer=2, bidirectional=bidirectional).double()
    ours = OurRecurrentStack(kind, 5, 4, n_layer=2, bidirectional=bidirectional).double()
    copy_fused_to_ours(fused, ours)
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    x_f, x_o = x.clone().requires_grad_(), x.clone().requires_grad_()
    d = 2 if bidirectional else 1
    h0 = torch.randn(2 * d, 3, 4, dtype=torch.float64)
    state = (h0, torch.randn_like(h0)) if kind == "lstm" else h0
    out_f, st_f = fused(x_f, state)
    out_o, st_o = ours(x_o, state)
    torch.testing.assert_close(out_o, out_f, atol=1e-10, rtol=1e-10)
    for a, b in zip(st_o if kind == "lstm" else (st_o,), st_f if kind == "lstm" else (st_f,)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    # gradients flow back through time the same way too
    (out_f ** 2).sum().backward()
    (out_o ** 2).sum().backward()
    torch.testing.assert_close(x_o.grad, x_f.grad, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_lm_state_carry_equals_one_long_pass(cell):
    # truncated BPTT carries the state: two halves with the state passed on == the whole sequence at once
    torch.manual_seed(0)
    model = RNNLM(RNNConfig(cell=cell, vocab_size=13, n_embd=6, n_hidden=6, n_layer=2, block_size=4)).eval()
    idx = torch.randint(0, 13, (2, 10))
    whole, _ = model(idx)
    first, state = model(idx[:, :6])
    second, _ = model(idx[:, 6:], state)
    torch.testing.assert_close(torch.cat([first, second], 1), whole)


def test_lm_ours_and_fused_same_logits_and_tying():
    torch.manual_seed(0)
    cfg = dict(cell="lstm", vocab_size=13, n_embd=6, n_hidden=6, n_layer=2, tie_weights=True)
    fused = RNNLM(RNNConfig(impl="fused", **cfg)).eval()
    ours = RNNLM(RNNConfig(impl="ours", **cfg)).eval()
    ours.embedding.load_state_dict(fused.embedding.state_dict())
    ours.head.bias.data.copy_(fused.head.bias.data)
    copy_fused_to_ours(fused.rnn, ours.rnn)
    idx = torch.randint(0, 13, (2, 9))
    torch.testing.assert_close(ours(idx)[0], fused(idx)[0], atol=1e-5, rtol=1e-5)
    assert fused.head.weight is fused.embedding.weight


def test_bidirectional_encoder_sees_the_future():
    torch.manual_seed(0)
    enc = RNNEncoder(RNNConfig(cell="gru", vocab_size=9, n_embd=4, n_hidden=3, n_layer=1)).eval()
    idx = torch.randint(0, 9, (1, 6))
    out, _ = enc(idx)
    assert out.shape == (1, 6, 6)
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 9
    out2, _ = enc(changed)
    assert not torch.allclose(out[0, 0], out2[0, 0])  # position 0 depends on the last token: not an LM


def test_config_validation():
    with pytest.raises(ValueError, match="tie_weights"):
        RNNConfig(n_embd=10, n_hidden=20, tie_weights=True)
    with pytest.raises(ValueError, match="gru_reset"):
        RNNConfig(cell="gru", gru_reset="before", impl="fused")


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_fused_recurrence_runs_in_float32_under_bf16_autocast(kind):
    """cuDNN has no bf16 RNN: under bf16 autocast torch runs it in float16 (an H100, torch 2.11: the LSTM's output
    came back float16), and bf16 training uses no loss scaler. Ours runs the recurrence in float32 instead: same
    outputs as without autocast, float32 out, float32 gradients. CPU autocast takes the same path as CUDA's."""
    torch.manual_seed(0)
    rnn = fused_stack(kind, 5, 4, n_layer=2)
    x = torch.randn(3, 7, 5)
    h0 = torch.randn(2, 3, 4)
    state = (h0, torch.randn_like(h0)) if kind == "lstm" else h0
    plain, _ = rnn(x, state)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, new_state = rnn(x.bfloat16(), tuple(s.bfloat16() for s in state) if kind == "lstm" else state.bfloat16())
    assert out.dtype == torch.float32
    assert all(s.dtype == torch.float32 for s in (new_state if kind == "lstm" else (new_state,)))
    # the input arrived in bf16 (as an autocast embedding would hand it over), so agree to bf16's rounding
    torch.testing.assert_close(out, plain, atol=2e-2, rtol=2e-2)
    out.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in rnn.parameters())


def test_a_model_keeps_its_state_dict_names_with_the_bf16_safe_fused_modules():
    """The float32-under-bf16 modules extend torch's: artifacts saved before load into them unchanged."""
    m = RNNLM(RNNConfig(cell="lstm", vocab_size=20, n_layer=2, n_embd=8, n_hidden=8, block_size=4))
    assert isinstance(m.rnn, torch.nn.LSTM)
    ref = torch.nn.LSTM(8, 8, num_layers=2, batch_first=True)
    assert [k for k in m.rnn.state_dict()] == [k for k in ref.state_dict()]
