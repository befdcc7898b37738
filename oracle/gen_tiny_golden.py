#!/usr/bin/env python3
"""Golden logits for tiny random llama / gemma3 / qwen3 models from Hugging Face transformers.

Runs where torch + transformers are installed (the device machine). For each architecture it
builds a tiny config, fills the weights from a seeded generator, runs the eager float32 forward
on fixed token prompts and writes, under OUT/<arch>/:
  meta.json           GGUF metadata to write (typed), transformers/torch versions, config, seed
  tensors/<gguf name>.npy   float32 weights, already in GGUF (llama.cpp) conventions
  prompt<i>.json / logits<i>.npy   token ids and float32 logits [n_tokens, n_vocab]
oracle/tiny_to_gguf (C++, our writer) turns meta.json + tensors/ into the committed GGUF.

Usage: python3 oracle/gen_tiny_golden.py OUT
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

SEED = 20261202
VOCAB = 320
PROMPTS = [[5], [1, 17, 200, 3, 99, 45, 250], [7, 7, 7, 300, 12, 1, 2, 3, 64, 128, 256, 319, 0]]


def set_weights(model, seed):
    """Every parameter from one seeded generator: matrices ~ N(0, 1/fan_in) so activations stay
    O(1) and logits are far from uniform; norm weights ~ 1 + 0.2 N(0,1) (gemma: 0.2 N(0,1), its
    RMSNorm multiplies by 1 + w)."""
    g = torch.Generator().manual_seed(seed)
    gemma = "gemma" in model.config.model_type
    for name, p in sorted(model.named_parameters()):
        if p.ndim == 1:
            w = 0.2 * torch.randn(p.shape, generator=g)
            p.data.copy_(w if gemma else 1.0 + w)
        else:
            p.data.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
        if name.endswith("embed_tokens.weight") and not gemma:
            p.data.mul_(np.sqrt(p.shape[-1]))  # N(0, 1) rows; gemma scales by sqrt(d) itself


def permute_llama(w, n_head):
    """convert_hf_to_gguf's q/k permutation: HF rotate_half pairs (i, i+d/2) -> ggml pairs (2i, 2i+1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build(arch):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                  rms_norm_eps=1e-6, max_position_embeddings=256)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common, num_hidden_layers=2, num_key_value_heads=2,
                                       tie_word_embeddings=True, rope_theta=10000.0)
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(**common, num_hidden_layers=2, num_key_value_heads=2,
                                       head_dim=16, tie_word_embeddings=False, rope_theta=1000000.0)
    elif arch == "gemma3":
        cfg = transformers.Gemma3TextConfig(**common, num_hidden_layers=6, num_key_value_heads=1,
                                            head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
                                            rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                            tie_word_embeddings=True)
    else:
        raise ValueError(arch)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    set_weights(model, SEED)
    return cfg, model


def rope_thetas(cfg):
    """(global, local) RoPE bases as the config resolved them (v5 keeps them in rope_parameters)."""
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and "full_attention" in rp:
        return rp["full_attention"]["rope_theta"], rp["sliding_attention"]["rope_theta"]
    if isinstance(rp, dict) and "rope_theta" in rp:
        return rp["rope_theta"], None
    return cfg.rope_theta, getattr(cfg, "rope_local_base_freq", None)


def gguf_tensors(arch, cfg, model):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {}
    shift = 1.0 if arch == "gemma3" else 0.0  # llama.cpp's converter stores gemma norms as 1 + w
    out["token_embd.weight"] = sd["model.embed_tokens.weight"]
    out["output_norm.weight"] = sd["model.norm.weight"] + shift
    if not cfg.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q = permute_llama(q, cfg.num_attention_heads)
            k = permute_llama(k, cfg.num_key_value_heads)
        out[b + "attn_q.weight"], out[b + "attn_k.weight"] = q, k
        out[b + "attn_v.weight"] = sd[p + "self_attn.v_proj.weight"]
        out[b + "attn_output.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[b + "attn_norm.weight"] = sd[p + "input_layernorm.weight"] + shift
        if arch in ("qwen3", "gemma3"):
            out[b + "attn_q_norm.weight"] = sd[p + "self_attn.q_norm.weight"] + shift
            out[b + "attn_k_norm.weight"] = sd[p + "self_attn.k_norm.weight"] + shift
        if arch == "gemma3":
            out[b + "post_attention_norm.weight"] = sd[p + "post_attention_layernorm.weight"] + shift
            out[b + "ffn_norm.weight"] = sd[p + "pre_feedforward_layernorm.weight"] + shift
            out[b + "post_ffw_norm.weight"] = sd[p + "post_feedforward_layernorm.weight"] + shift
        else:
            out[b + "ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        out[b + "ffn_gate.weight"] = sd[p + "mlp.gate_proj.weight"]
        out[b + "ffn_up.weight"] = sd[p + "mlp.up_proj.weight"]
        out[b + "ffn_down.weight"] = sd[p + "mlp.down_proj.weight"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def gguf_metadata(arch, cfg):
    glob, local = rope_thetas(cfg)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    md = [["general.architecture", "string", arch],
          ["general.name", "string", f"tiny-random-{arch} (transformers {transformers.__version__}, seed {SEED})"],
          [f"{arch}.context_length", "u32", cfg.max_position_embeddings],
          [f"{arch}.embedding_length", "u32", cfg.hidden_size],
          [f"{arch}.block_count", "u32", cfg.num_hidden_layers],
          [f"{arch}.feed_forward_length", "u32", cfg.intermediate_size],
          [f"{arch}.attention.head_count", "u32", cfg.num_attention_heads],
          [f"{arch}.attention.head_count_kv", "u32", cfg.num_key_value_heads],
          [f"{arch}.attention.layer_norm_rms_epsilon", "f32", cfg.rms_norm_eps],
          [f"{arch}.rope.freq_base", "f32", float(glob)]]
    if arch == "llama":
        md.append([f"{arch}.rope.dimension_count", "u32", head_dim])
    else:
        md.append([f"{arch}.attention.key_length", "u32", head_dim])
        md.append([f"{arch}.attention.value_length", "u32", head_dim])
    if arch == "gemma3":
        md.append([f"{arch}.attention.sliding_window", "u32", cfg.sliding_window])
        assert float(local) == 10000.0, f"lockstep assumes local RoPE base 10000, config has {local}"
        assert list(cfg.layer_types) == ["sliding_attention"] * 5 + ["full_attention"], cfg.layer_types
    return md


def main(out_dir):
    for arch in ["llama", "qwen3", "gemma3"]:
        cfg, model = build(arch)
        d = os.path.join(out_dir, arch)
        os.makedirs(os.path.join(d, "tensors"), exist_ok=True)
        for name, w in gguf_tensors(arch, cfg, model).items():
            np.save(os.path.join(d, "tensors", name + ".npy"), w)
        meta = {"metadata": gguf_metadata(arch, cfg), "seed": SEED,
                "transformers": transformers.__version__, "torch": torch.__version__,
                "config": json.loads(cfg.to_json_string())}
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        for i, ids in enumerate(PROMPTS):
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
            np.save(os.path.join(d, f"logits{i}.npy"), logits.astype(np.float32))
            with open(os.path.join(d, f"prompt{i}.json"), "w") as f:
                json.dump(ids, f)
        print(arch, "ok", {k: getattr(cfg, k, None) for k in ("layer_types", "rope_parameters")})


if __name__ == "__main__":
    main(sys.argv[1])
