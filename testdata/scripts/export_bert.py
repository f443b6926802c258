#!/usr/bin/python3
"""Export a tiny BERT-style encoder to ONNX for the compiler's golden tests.

Run from the repository root (Debian's system python, torch 1.13):

    /usr/bin/python3 testdata/scripts/export_bert.py

Writes:
    testdata/models/bert_tiny.onnx           (opset 13)
    testdata/models/bert_tiny_opset14.onnx   (opset 14: the default of many exporters; LayerNorm decomposed)
    testdata/models/bert_tiny_opset17.onnx   (opset 17; LayerNormalization op)

The encoder is written by hand in plain torch, mirroring the structure of
HuggingFace's BertModel (embeddings -> N x [self-attention, FFN] -> pooler) so
the exported graph has the same op patterns (Shape/Gather/Unsqueeze/Concat/
Reshape chains for view(), Slice of the position-id buffer, extended attention
mask arithmetic, erf-GELU, ...), but with a reduced config so the file fits in
git: hidden 768, 12 heads, 1 layer, intermediate 1024, vocab 512, 128
positions, 2 token types.

The weights are synthetic: deterministic, low-entropy values (small integers
{-2..2} times a per-tensor power of two, i.i.d. per element, no tiling; see
synthetic_weights.py) so the .onnx file compresses well in git (~20 MB raw,
~2.6 MB zlib).  They are not
a trained model; the outputs are only meaningful as golden reference values.
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
    hidden_size = 768
    num_hidden_layers = 1
    num_attention_heads = 12
    intermediate_size = 1024
    max_position_embeddings = 128
    type_vocab_size = 2
    layer_norm_eps = 1e-12


def gelu(x):
    # Original BERT / HF "gelu" (erf form).
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer(
            "position_ids", torch.arange(cfg.max_position_embeddings).expand((1, -1))
        )

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.all_head_size = self.num_heads * self.head_dim
        self.query = nn.Linear(cfg.hidden_size, self.all_head_size)
        self.key = nn.Linear(cfg.hidden_size, self.all_head_size)
        self.value = nn.Linear(cfg.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        x = x.view(x.size(0), x.size(1), self.num_heads, self.head_dim)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, extended_attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_dim)
        scores = scores + extended_attention_mask
        probs = nn.functional.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        context = torch.matmul(probs, v)
        context = context.permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size(0), context.size(1), self.all_head_size)
        return context


class SelfOutput(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_output = SelfOutput(cfg)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.output_LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, extended_attention_mask):
        attn = self.attention(hidden_states, extended_attention_mask)
        attn = self.attention_output(attn, hidden_states)
        inter = gelu(self.intermediate(attn))
        out = self.dropout(self.output(inter))
        return self.output_LayerNorm(out + attn)


class Pooler(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        first_token = hidden_states[:, 0]
        return self.activation(self.dense(first_token))


class TinyBert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.pooler = Pooler(cfg)

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        hidden = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            hidden = layer(hidden, extended_attention_mask)
        return hidden, self.pooler(hidden)


def init_synthetic(model: nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if isinstance_param(model, name, nn.LayerNorm):
                if name.endswith("weight"):
                    # gamma in {0.75, 0.875, 1, 1.125, 1.25}
                    p.copy_(1.0 + low_entropy(p.shape, name, 1.0 / 8, tile=False))
                else:
                    p.copy_(low_entropy(p.shape, name, 1.0 / 32, tile=False))
            elif isinstance_param(model, name, nn.Embedding):
                p.copy_(low_entropy(p.shape, name, 1.0 / 16, tile=False))
            elif name.endswith("weight"):  # nn.Linear [out, in]
                fan_in = p.shape[1]
                # {-2..2} has std sqrt(2): aim for std ~ 1/sqrt(fan_in).
                p.copy_(low_entropy(p.shape, name, pow2_scale(1.0 / math.sqrt(2.0 * fan_in)),
                                      tile=False))
            else:  # nn.Linear bias
                p.copy_(low_entropy(p.shape, name, 1.0 / 64, tile=False))
        # position_ids buffer stays arange(max_positions).


def isinstance_param(model, param_name, cls):
    mod_name = param_name.rsplit(".", 1)[0]
    return isinstance(model.get_submodule(mod_name), cls)


def export(model, path, opset):
    batch, seq = 2, 16
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, Config.vocab_size, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1, 11:] = 0
    token_type_ids = torch.zeros(batch, seq, dtype=torch.int64)
    token_type_ids[:, seq // 2:] = 1
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(
        model,
        (input_ids, attention_mask, token_type_ids),
        path,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={
            "input_ids": axes,
            "attention_mask": axes,
            "token_type_ids": axes,
            "last_hidden_state": axes,
            "pooler_output": {0: "batch"},
        },
        opset_version=opset,
        do_constant_folding=True,
    )
    report(
        path,
        {
            "input_ids": ["batch", "seq"],
            "attention_mask": ["batch", "seq"],
            "token_type_ids": ["batch", "seq"],
            "last_hidden_state": ["batch", "seq", 768],
            "pooler_output": ["batch", 768],
        },
    )
    with torch.no_grad():
        h, p = model(input_ids, attention_mask, token_type_ids)
    print(f"   sample run: last_hidden_state std {h.std().item():.4f}, "
          f"pooler_output min/max {p.min().item():.4f}/{p.max().item():.4f}")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyBert(Config()).eval()
    init_synthetic(model)
    os.makedirs(MODELS, exist_ok=True)
    export(model, os.path.join(MODELS, "bert_tiny.onnx"), 13)
    export(model, os.path.join(MODELS, "bert_tiny_opset14.onnx"), 14)
    export(model, os.path.join(MODELS, "bert_tiny_opset17.onnx"), 17)


if __name__ == "__main__":
    main()
