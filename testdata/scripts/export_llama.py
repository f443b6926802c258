#!/usr/bin/python3
"""Export a tiny LLaMA-style decoder to ONNX for the compiler's golden tests.

Run from the repository root (Debian's system python, torch 1.13):

    /usr/bin/python3 testdata/scripts/export_llama.py

Writes testdata/models/llama_tiny.onnx (opset 14): input input_ids int64 [batch, seq],
output logits float32 [batch, seq, 512].

The model is written by hand in plain torch, mirroring HuggingFace's LlamaForCausalLM
(transformers 4.35, grouped-query attention) line by line so the exported graph has the same
op patterns: RMSNorm as x * torch.rsqrt(mean(x^2) + eps) * weight, q/k/v projections viewed to
heads and transposed, rotary embedding with cos/sin cached [max_pos, head_dim] buffers sliced
to the sequence length and gathered by position ids (rotate_half form: cat(-x2, x1)), repeat_kv (expand +
reshape) for the grouped key/value heads, scores / sqrt(head_dim), the additive causal mask of
_make_causal_mask (torch.full(finfo.min) + masked_fill), softmax in float32, SwiGLU MLP
(down(silu(gate(x)) * up(x))), untied LM head. No attention_mask input: the mask is causal only.
Config: hidden 128, 2 layers, 4 query heads, 2 key/value heads, head dim 32, intermediate 344,
vocab 512, max positions 64, rope theta 10000, RMSNorm eps 1e-6.

torch 1.13 has no ONNX Rsqrt: it exports torch.rsqrt(v) as Div(1, Sqrt(v)) (symbolic_opset9),
and F.silu(x) as Mul(x, Sigmoid(x)).

Why the 4.35 rotary form: transformers <= 4.34 cached cos/sin as [1, 1, max_pos, dim] and
did cos.squeeze(1).squeeze(0) before the gather; torch 1.13 exports each squeeze of the
dynamically sliced buffer as If(Equal(Shape(x)[d], 1), Squeeze, Identity), whose two branches
have different ranks, and cuvil cannot compile that yet ("value ... has unknown rank").

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
    hidden_size = 128
    intermediate_size = 344
    num_hidden_layers = 2
    num_attention_heads = 4
    num_key_value_heads = 2
    max_position_embeddings = 64
    rope_theta = 10000.0
    rms_norm_eps = 1e-6


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        t = torch.arange(max_position_embeddings, dtype=inv_freq.dtype)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)  # [max_pos, dim]
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return (
            self.cos_cached[:seq_len].to(dtype=x.dtype),
            self.sin_cached[:seq_len].to(dtype=x.dtype),
        )


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)  # [bs, 1, seq_len, dim]
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hidden_size = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = cfg.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, cfg.max_position_embeddings, cfg.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        kv_seq_len = key_states.shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


def _make_causal_mask(input_ids_shape, dtype, past_key_values_length=0):
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = 0
        position_ids = torch.arange(past_key_values_length, seq_length + past_key_values_length,
                                    dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, seq_length)
        inputs_embeds = self.embed_tokens(input_ids)
        attention_mask = _make_causal_mask((batch_size, seq_length), inputs_embeds.dtype,
                                           past_key_values_length)
        hidden_states = inputs_embeds
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, position_ids)
        hidden_states = self.norm(hidden_states)
        return self.lm_head(hidden_states)


def init_synthetic(model: nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            mod = model.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(mod, LlamaRMSNorm):
                p.copy_(1.0 + low_entropy(p.shape, name, 1.0 / 8, tile=False))
            elif isinstance(mod, nn.Embedding):
                p.copy_(low_entropy(p.shape, name, 1.0 / 16, tile=False))
            else:  # nn.Linear [out, in], no bias
                fan_in = p.shape[1]
                p.copy_(low_entropy(p.shape, name, pow2_scale(1.0 / math.sqrt(2.0 * fan_in)),
                                    tile=False))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM(Config()).eval()
    init_synthetic(model)
    os.makedirs(MODELS, exist_ok=True)
    path = os.path.join(MODELS, "llama_tiny.onnx")
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, Config.vocab_size, (2, 16), generator=g)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(
        model,
        (input_ids,),
        path,
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "logits": axes},
        opset_version=14,
        do_constant_folding=True,
    )
    report(path, {"input_ids": ["batch", "seq"], "logits": ["batch", "seq", Config.vocab_size]})
    with torch.no_grad():
        y = model(input_ids)
    print(f"   sample run: logits std {y.std().item():.4f} min/max {y.min().item():.4f}/{y.max().item():.4f}")


if __name__ == "__main__":
    main()
