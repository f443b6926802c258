#!/usr/bin/python3
"""Export a tiny GPT-2-style decoder to ONNX for the compiler's golden tests.

Run from the repository root (Debian's system python, torch 1.13):

    /usr/bin/python3 testdata/scripts/export_gpt2.py

Writes:
    testdata/models/gpt2_tiny.onnx       (opset 13) input_ids, attention_mask -> logits
    testdata/models/gpt2_tiny_past.onnx  (opset 13) the same model as one decode step with a
                                         KV cache: also past_key_<i>/past_value_<i> in,
                                         present_key_<i>/present_value_<i> out

The model is written by hand in plain torch, mirroring HuggingFace's GPT2LMHeadModel
(transformers 4.2x) line by line so the exported graph has the same op patterns: Conv1D as
addmm on a 2-D view, the c_attn output split into q/k/v, the head split by view/permute,
scores / sqrt(head_dim) with the divisor as a tensor, the registered lower-triangular bool
`bias` buffer sliced by [key_len - query_len : key_len, :key_len] and applied with
torch.where(causal, scores, finfo.min), the additive mask (1 - mask) * finfo.min, softmax,
gelu_new (tanh form with pow 3), LayerNorm, and the LM head tied to the token embedding.
Config: n_layer 2, n_embd 128, n_head 4 (head dim 32), n_positions 64, vocab 512, n_inner
512 (4 * n_embd), LayerNorm eps 1e-5.

The weights are synthetic: deterministic, low-entropy values (small integers {-2..2} times a
per-tensor power of two, i.i.d. per element; see synthetic_weights.py). Not a trained model.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import torch
from torch import nn

from synthetic_weights import low_entropy, pow2_scale, report

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.normpath(os.path.join(HERE, "..", "models"))


class Config:
    vocab_size = 512
    n_positions = 64
    n_embd = 128
    n_layer = 2
    n_head = 4
    n_inner = 4 * 128
    layer_norm_epsilon = 1e-5


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer with the weight stored [in, out], run as addmm."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    # HF NewGELUActivation (the tanh approximation GPT-2 was trained with).
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        max_positions = cfg.n_positions
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
        )
        self.embed_dim = cfg.n_embd
        self.num_heads = cfg.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _attn(self, query, key, value, attention_mask):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.tensor(
            value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
        )
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].to(torch.bool)
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.tensor(mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)  # (batch, head, seq, head_dim)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (self.num_heads * self.head_dim,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, layer_past, attention_mask):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query)
        key = self._split_heads(key)
        value = self._split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        return attn_output, present


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.n_inner, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_inner)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        hidden_states = gelu_new(self.c_fc(hidden_states))
        return self.dropout(self.c_proj(hidden_states))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = GPT2MLP(cfg)

    def forward(self, hidden_states, layer_past, attention_mask):
        residual = hidden_states
        attn_output, present = self.attn(self.ln_1(hidden_states), layer_past, attention_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = residual + self.mlp(self.ln_2(hidden_states))
        return hidden_states, present


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in HF

    def forward(self, input_ids, attention_mask, past_key_values=None):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])

        attention_mask = attention_mask.view(batch_size, -1)
        attention_mask = attention_mask[:, None, None, :]
        attention_mask = attention_mask.to(dtype=torch.float32)
        attention_mask = (1.0 - attention_mask) * torch.finfo(torch.float32).min

        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        hidden_states = self.drop(hidden_states)
        output_shape = input_shape + (hidden_states.size(-1),)
        presents = ()
        for block, layer_past in zip(self.h, past_key_values):
            hidden_states, present = block(hidden_states, layer_past, attention_mask)
            presents = presents + (present,)
        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return self.lm_head(hidden_states), presents


class NoCache(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask)[0]


class WithCache(nn.Module):
    """Flat signature for the exporter: per-layer past key/value in, logits + presents out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *past):
        pkv = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        logits, presents = self.model(input_ids, attention_mask, pkv)
        flat = [logits]
        for k, v in presents:
            flat += [k, v]
        return tuple(flat)


def init_synthetic(model: nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():  # the tied lm_head weight is listed once
            mod = model.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(mod, nn.LayerNorm):
                if name.endswith("weight"):
                    p.copy_(1.0 + low_entropy(p.shape, name, 1.0 / 8, tile=False))
                else:
                    p.copy_(low_entropy(p.shape, name, 1.0 / 32, tile=False))
            elif isinstance(mod, nn.Embedding):
                p.copy_(low_entropy(p.shape, name, 1.0 / 16, tile=False))
            elif name.endswith("weight"):  # Conv1D [in, out]
                fan_in = p.shape[0]
                p.copy_(low_entropy(p.shape, name, pow2_scale(1.0 / math.sqrt(2.0 * fan_in)),
                                    tile=False))
            else:  # Conv1D bias
                p.copy_(low_entropy(p.shape, name, 1.0 / 64, tile=False))


def sample_inputs(batch, seq, total):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, Config.vocab_size, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, total, dtype=torch.int64)
    attention_mask[1, :2] = 0
    return input_ids, attention_mask


def export_plain(model, path):
    input_ids, attention_mask = sample_inputs(2, 16, 16)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(
        NoCache(model).eval(),
        (input_ids, attention_mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
        opset_version=13,
        do_constant_folding=True,
    )
    report(path, {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"],
                  "logits": ["batch", "seq", Config.vocab_size]})


def past_names():
    ins, outs = [], []
    for i in range(Config.n_layer):
        ins += [f"past_key_{i}", f"past_value_{i}"]
        outs += [f"present_key_{i}", f"present_value_{i}"]
    return ins, outs


def export_past(model, path):
    batch, past, seq = 2, 5, 3
    input_ids, attention_mask = sample_inputs(batch, seq, past + seq)
    g = torch.Generator().manual_seed(1)
    head_dim = Config.n_embd // Config.n_head
    pasts = [torch.randn(batch, Config.n_head, past, head_dim, generator=g)
             for _ in range(2 * Config.n_layer)]
    in_names, out_names = past_names()
    kv_axes = {0: "batch", 2: "past"}
    present_axes = {0: "batch", 2: "total"}
    dynamic_axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
                    "logits": {0: "batch", 1: "seq"}}
    dynamic_axes.update({n: kv_axes for n in in_names})
    dynamic_axes.update({n: present_axes for n in out_names})
    torch.onnx.export(
        WithCache(model).eval(),
        (input_ids, attention_mask, *pasts),
        path,
        input_names=["input_ids", "attention_mask"] + in_names,
        output_names=["logits"] + out_names,
        dynamic_axes=dynamic_axes,
        opset_version=13,
        do_constant_folding=True,
    )
    kv = ["batch", Config.n_head, "past", head_dim]
    pr = ["batch", Config.n_head, "total", head_dim]
    dims = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "total"],
            "logits": ["batch", "seq", Config.vocab_size]}
    dims.update({n: kv for n in in_names})
    dims.update({n: pr for n in out_names})
    report(path, dims)

    # The cached step must agree with the uncached model on the same tokens. (The exporter
    # restores the wrapper's training flag, so keep the wrappers in eval mode.)
    assert not model.training
    with torch.no_grad():
        full_ids = torch.randint(0, Config.vocab_size, (batch, past + seq), generator=g)
        mask = torch.ones(batch, past + seq, dtype=torch.int64)
        mask[1, :2] = 0
        full, _ = model(full_ids, mask)
        _, presents = model(full_ids[:, :past], mask[:, :past])
        step, _ = model(full_ids[:, past:], mask, presents)
        err = (full[:, past:] - step).abs().max().item()
        print(f"   cached step vs full run: max abs diff {err:.3g}")
        assert err < 1e-4, err


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT2LMHeadModel(Config()).eval()
    init_synthetic(model)
    assert model.lm_head.weight is model.wte.weight
    os.makedirs(MODELS, exist_ok=True)
    export_plain(model, os.path.join(MODELS, "gpt2_tiny.onnx"))
    export_past(model, os.path.join(MODELS, "gpt2_tiny_past.onnx"))


if __name__ == "__main__":
    main()
