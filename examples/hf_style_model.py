"""A Hugging Face style decoder (GPT-2's layout: config object, token and position embeddings, causal
self-attention with a mask, MLP, tied LM head) written in plain torch, so it needs no `transformers`; compiled
as is, then called with prompts of several lengths.

    python3 examples/hf_style_model.py

The first call compiles the whole forward as one graph. A second sequence length recompiles once with that
dimension symbolic (automatic dynamic shapes), and every later length reuses it: FASTCOMP_LOGS=recompiles,dynamic
shows those decisions.
"""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import fastcomp
from fastcomp.testing import CompileCounter


@dataclasses.dataclass
class GPTConfig:
    vocab_size: int = 1000
    n_positions: int = 128
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4
    layer_norm_epsilon: float = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, hidden_states):
        b, t, c = hidden_states.shape
        q, k, v = self.c_attn(hidden_states).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        # Made per call, as Llama-style models do (slicing a stored [n_positions, n_positions] mask with `[:t, :t]`
        # would make fastcomp specialise the length: a recompile per prompt length).
        causal_mask = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(causal_mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.c_proj(out.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states))
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPTLMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            hidden_states = block(hidden_states)
        return self.lm_head(self.ln_f(hidden_states))


def main():
    torch.manual_seed(0)
    model = GPTLMHeadModel(GPTConfig()).eval()
    compiled = fastcomp.compile(model)
    with torch.no_grad(), CompileCounter() as counter:
        for length in (16, 24, 9, 31):
            input_ids = torch.randint(0, model.config.vocab_size, (2, length))
            logits = compiled(input_ids)
            torch.testing.assert_close(logits, model(input_ids), rtol=1e-4, atol=1e-4)
            print(f"prompt length {length:2d}: logits {tuple(logits.shape)}, compiles so far {counter.frame_count}")
    print(f"{counter.graph_count} graphs, {counter.break_count} graph breaks for 4 prompt lengths")
    assert counter.frame_count == 2  # static, then the length as a symbol for every later length
    report = fastcomp.explain(model)(torch.randint(0, model.config.vocab_size, (2, 16)))
    print(f"explain: {report.graph_count} graph, {report.graph_break_count} breaks, {report.op_count} ops")


if __name__ == "__main__":
    main()
