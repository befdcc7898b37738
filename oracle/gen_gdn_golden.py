#!/usr/bin/env python3
"""Goldens for the hybrid Gated DeltaNet families (qwen3_5 text, qwen3_next) from transformers.

Runs where torch + transformers 5.17 are installed (CPU torch is enough). For each family it
builds a tiny random model (8 layers: 3 linear-attention + 1 gated full-attention, twice; conv
kernel 4; 2 key heads and 4 value heads of 16 dims, so the key-head sharing is exercised),
seeds every weight, saves it with save_pretrained next to a tiny byte-level BPE tokenizer, and
converts it with llama.cpp's own convert_hf_to_gguf.py --outtype f32 --no-mtp (so the GGUF side
of the golden is not written by lockstep's writer). Then, from the eager float32 forward:
  prompt.json / logits_prompt.npy   one pass over PROMPT (80 tokens: crosses the 64-token chunk
                                    of transformers' chunked delta rule)  [80, n_vocab]
  decode.json / logits_decode.npy   teacher-forced decode: a prefill of the first PREFILL tokens
                                    (chunked form, crosses 64), then one token per step through
                                    the cache (causal_conv1d_update + the recurrent delta rule);
                                    row i = logits after token PREFILL + i  [DECODE, n_vocab]
and under qwen3_5/ops/ the op goldens: transformers' own causal conv and gated delta rule
functions on seeded random inputs (see ops() below).

The tokenizer: the converter needs one (it writes tokenizer.ggml.*). A byte-level BPE is
trained by the `tokenizers` package on a fixed text to the model's vocabulary size. Its
pre-tokenizer hash is not in llama.cpp's table of known hashes (get_vocab_base_pre), so this
script runs the converter with that one method answering "qwen2"; no tensor or hyperparameter
passes through it, and the goldens feed token ids, never text.

Usage: python3 oracle/gen_gdn_golden.py OUT_DIR [PEER_SRC]
  PEER_SRC: llama.cpp source tree (default /root/.cache/lockstep/peer/0.3.36/src)
Writes OUT_DIR/{qwen3_5,qwen3_next}/ and OUT_DIR/MANIFEST-<family>.json (sha256 per file).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

SEED = 20261203
VOCAB = 320
PREFILL = 70
DECODE = 10
PEER = "/root/.cache/lockstep/peer/0.3.36/src"


def prompt_ids(n, seed):
    g = np.random.default_rng(seed)
    return [int(t) for t in g.integers(0, VOCAB, size=n)]


def set_weights(model, seed):
    """Every parameter from one seeded generator. Matrices ~ N(0, 1/fan_in); the 1 + w RMSNorms
    get w ~ 0.2 N(0,1); the gated norm (plain weight) 1 + 0.2 N; dt_bias 1 + 0.2 N; A_log =
    log U(0.5, 2) (decay per token exp(-A softplus(.)) stays well inside (0, 1)); conv taps
    ~ N(0, 1/kernel); embeddings N(0, 1) rows."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if name.endswith("A_log"):
            p.data.copy_(torch.log(0.5 + 1.5 * torch.rand(p.shape, generator=g)))
        elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
            p.data.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:
            p.data.copy_(0.2 * torch.randn(p.shape, generator=g))
        elif "conv1d" in name:
            p.data.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
        else:
            p.data.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
        if name.endswith("embed_tokens.weight"):
            p.data.mul_(np.sqrt(p.shape[-1]))


def build(family):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=8,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                  max_position_embeddings=256, tie_word_embeddings=False,
                  linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4,
                  layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2)
    if family == "qwen3_5":
        cfg = transformers.Qwen3_5TextConfig(
            **common, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                       "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                                       "mrope_interleaved": True})
        cls = transformers.Qwen3_5ForCausalLM
    elif family == "qwen3_next":
        # llama.cpp's qwen3next requires MoE FFNs in every layer (load_arch_tensors).
        cfg = transformers.Qwen3NextConfig(
            **common, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                       "partial_rotary_factor": 0.25},
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, decoder_sparse_step=1, norm_topk_prob=True,
            mlp_only_layers=[])
        cls = transformers.Qwen3NextForCausalLM
    else:
        raise ValueError(family)
    torch.manual_seed(SEED)
    model = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    set_weights(model, SEED)
    return cfg, model


def save_tokenizer(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["the quick brown fox jumps over the lazy dog " * 4,
            "lockstep runs the same bytes alone or batched, chunked or not " * 4]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text, trainer)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        # lockstep's tokenizer wants a bos id in the GGUF (Qwen adds none: add_bos_token false).
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                   "bos_token": "<|endoftext|>", "add_bos_token": False,
                   "model_max_length": 256}, f)


CONVERT = r"""
import sys
sys.path.insert(0, sys.argv.pop(1))
sys.argv.pop(0)  # "-c": the converter sees its own path as argv[0]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(model_dir, out_file, peer):
    env = dict(os.environ, PYTHONPATH=os.path.join(peer, "gguf-py"))
    cmd = [sys.executable, "-c", CONVERT, peer, os.path.join(peer, "convert_hf_to_gguf.py"),
           model_dir, "--outtype", "f32", "--no-mtp", "--outfile", out_file]
    subprocess.run(cmd, check=True, env=env)


def logits_prompt(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()


def logits_decode(model, ids):
    """Prefill ids[:PREFILL] in one call (cache on), then feed ids[PREFILL:] one at a time."""
    rows = []
    with torch.no_grad():
        out = model(torch.tensor([ids[:PREFILL]]), use_cache=True)
        cache = out.past_key_values
        for t in ids[PREFILL:]:
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0, -1].float().numpy())
    return np.stack(rows)


def ops(d):
    """transformers' own conv and delta-rule functions on seeded random inputs (float32)."""
    from transformers.models.qwen3_next import modeling_qwen3_next as m
    g = torch.Generator().manual_seed(SEED + 1)
    os.makedirs(d, exist_ok=True)
    # causal depthwise conv + SiLU: x [C, T], w [C, K]; also the one-token update path from
    # the state after T0 tokens, so the state semantics (last K-1 inputs) are pinned too.
    C, T, K, T0 = 24, 80, 4, 70
    x = torch.randn(1, C, T, generator=g)
    w = torch.randn(C, K, generator=g) / 2
    y = m.causal_conv1d_fn(x, w, None, activation="silu")
    state = x[:, :, T0 - (K - 1):T0].clone()
    ups = []
    for t in range(T0, T):
        ups.append(m.causal_conv1d_update(x[:, :, t:t + 1], state, w, None, "silu"))
    np.save(os.path.join(d, "conv_x.npy"), x[0].numpy())
    np.save(os.path.join(d, "conv_w.npy"), w.numpy())
    np.save(os.path.join(d, "conv_y.npy"), y[0].numpy())
    np.save(os.path.join(d, "conv_y_update.npy"), torch.cat(ups, dim=-1)[0].numpy())
    # gated delta rule: q, k [T, Hk, dk] (repeat_interleave to Hv heads, as Qwen3-Next does),
    # v [T, Hv, dv], g [T, Hv] <= 0, beta [T, Hv] in (0, 1), initial state [Hv, dk, dv].
    T, Hk, Hv, dk, dv = 100, 2, 4, 16, 8
    q = torch.randn(1, T, Hk, dk, generator=g)
    k = torch.randn(1, T, Hk, dk, generator=g)
    v = torch.randn(1, T, Hv, dv, generator=g)
    gl = -torch.rand(1, T, Hv, generator=g) * 0.5
    beta = torch.sigmoid(torch.randn(1, T, Hv, generator=g))
    s0 = torch.randn(1, Hv, dk, dv, generator=g) * 0.3
    qr, kr = (a.repeat_interleave(Hv // Hk, dim=2) for a in (q, k))
    oc, sc = m.torch_chunk_gated_delta_rule(qr, kr, v, g=gl, beta=beta, initial_state=s0,
                                            output_final_state=True, use_qk_l2norm_in_kernel=True)
    orr, sr = m.torch_recurrent_gated_delta_rule(qr, kr, v, g=gl, beta=beta, initial_state=s0,
                                                 output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)
    for name, a in [("q", q[0]), ("k", k[0]), ("v", v[0]), ("g", gl[0]), ("beta", beta[0]),
                    ("s0", s0[0]), ("out_chunk", oc[0]), ("state_chunk", sc[0]),
                    ("out_recurrent", orr[0]), ("state_recurrent", sr[0])]:
        np.save(os.path.join(d, f"gdr_{name}.npy"), a.float().numpy().astype(np.float32))


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main(out_dir, peer):
    for family in ["qwen3_5", "qwen3_next"]:
        cfg, model = build(family)
        d = os.path.join(out_dir, family)
        os.makedirs(d, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "tiny-random-" + family)  # the converter names the model after it
            model.save_pretrained(src)
            save_tokenizer(src)
            convert(src, os.path.join(d, family + ".gguf"), peer)
        ids = prompt_ids(PREFILL + DECODE, SEED + 7)
        np.save(os.path.join(d, "logits_prompt.npy"), logits_prompt(model, ids).astype(np.float32))
        np.save(os.path.join(d, "logits_decode.npy"), logits_decode(model, ids).astype(np.float32))
        with open(os.path.join(d, "prompt.json"), "w") as f:
            json.dump(ids, f)
        with open(os.path.join(d, "decode.json"), "w") as f:
            json.dump({"prefill": PREFILL, "tokens": ids}, f)
        if family == "qwen3_5":
            ops(os.path.join(d, "ops"))
        files = sorted(os.path.relpath(os.path.join(r, f), d)
                       for r, _, fs in os.walk(d) for f in fs if f != "MANIFEST.json")
        manifest = {
            "generator": "oracle/gen_gdn_golden.py (CPU torch); GGUF by llama.cpp's "
                         "convert_hf_to_gguf.py --outtype f32 --no-mtp from " + peer,
            "oracle": "Hugging Face transformers, eager attention, float32; prompt logits from one "
                      "forward, decode logits teacher-forced through the cache",
            "transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED,
            "prefill": PREFILL, "decode": DECODE,
            "config": json.loads(cfg.to_json_string()),
            "tolerances": "engine/core/tolerances.h: kTinyGoldenNmse, kTinyGoldenMaxKl, "
                          "kGoldenDecisiveMargin",
            "sha256": {f: sha(os.path.join(d, f)) for f in files},
        }
        with open(os.path.join(d, "MANIFEST.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        print(family, "ok", cfg.layer_types)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else PEER)
