#!/usr/bin/env python3
"""Golden logits for tiny random models of today's families, with the GGUF written by llama.cpp's
own converter (not lockstep's writer), so both the forward and the file layout are pinned by code
nobody here wrote (docs/models.md, docs/testing.md).

For each family of FAMILIES it:
  1. builds a tiny random transformers model (a config from the family's builder; every weight
     from one seeded generator) and saves it with save_pretrained, beside a tiny byte-level BPE
     tokenizer (256 byte symbols + <|endoftext|>; the converter needs a tokenizer to write a GGUF);
  2. converts it with llama.cpp's convert_hf_to_gguf.py --outtype f32 (CONVERTER, gguf-py on
     PYTHONPATH). The converter identifies a BPE pre-tokenizer by hashing its output on a test
     text; our tiny tokenizer matches no known hash, so the converter runs from a wrapper that
     answers "qwen2" to that one question (get_vocab_base_pre). Only tokenizer.ggml.pre depends on
     it; tensors and hyperparameters are the converter's own;
  3. runs the eager float32 forward on fixed prompts (logits of every position) and a
     teacher-forced decode: the prompt as one prefill, then each continuation token as its own
     step through transformers' KV cache, the logits of each step;
  4. checks the router margins (MoE): at every token of every run the k-th and (k+1)-th router
     logits of every MoE layer differ by more than MIN_ROUTER_MARGIN, so a float rounding
     difference cannot flip which experts a token uses; the smallest margin goes to meta.json;
  5. writes OUT/<family>/{<family>.gguf, meta.json, prompt<i>.json, logits<i>.npy,
     decode.json, decode_logits.npy, MANIFEST.json (sha256 of every file, tool versions)}.

Usage (CPU torch is enough):
  /root/.cache/lockstep/golden-venv/bin/python oracle/gen_family_golden.py golden/families [FAMILY...]
Another family: add a builder to FAMILIES (or import this module and register into it).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

SEED = int(os.environ.get("LOCKSTEP_GOLDEN_SEED", "20261206"))
VOCAB = 320
PROMPTS = [[5], [1, 17, 200, 3, 99, 45, 250], [7, 7, 7, 300, 12, 1, 2, 3, 64, 128, 256, 319, 0]]
DECODE_PROMPT = [11, 42, 250, 3, 77, 19]
DECODE_CONTINUATION = [5, 300, 64, 64, 1, 128, 17, 9, 280, 33]
MIN_ROUTER_MARGIN = 1e-3
MERGES = [("h", "e"), ("l", "l"), ("\u0120", "t"), ("i", "n")]  # "\u0120" is GPT-2's space symbol
CONVERTER = os.environ.get("LOCKSTEP_CONVERTER",
                           "/root/.cache/lockstep/peer/0.3.36/src/convert_hf_to_gguf.py")


# ---- families ---------------------------------------------------------------------------------

def build_qwen3_moe():
    """Qwen3MoeForCausalLM: 3 layers, every one MoE (llama.cpp's converter has no dense FFN for
    qwen3moe), 8 experts, top-2, renormalized (norm_topk_prob), untied head."""
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], rms_norm_eps=1e-6, max_position_embeddings=256,
        rope_theta=1000000.0, tie_word_embeddings=False)
    return cfg, "qwen3moe"


def build_qwen3_5_moe():
    """Qwen3_5MoeForCausalLM (text): qwen3_5's hybrid layers (3 Gated DeltaNet, 1 gated attention,
    twice; the shapes of oracle/gen_gdn_golden.py's qwen3_5) with an MoE FFN in every layer:
    4 experts top-2 (always renormalized) and a sigmoid-gated shared expert."""
    cfg = transformers.Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, max_position_embeddings=256,
        tie_word_embeddings=False, linear_conv_kernel_dim=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                         "mrope_interleaved": True},
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48)
    return cfg, "qwen35moe"


def build_gemma4_text():
    """Gemma4ForCausalLM (text): 6 layers, sliding (window 4, head_dim 16, RoPE base 10000) and
    full (global_head_dim 32, proportional RoPE over a quarter of the head, base 1e6) as
    S S F S S F; the last 2 layers KV-shared (layer 4 reads layer 3's KV, layer 5 layer 2's) with
    double-wide MLPs; per-layer inputs of 8 dims; final logit softcap 30. The layer scalars are
    drawn too (set_weights)."""
    cfg = transformers.Gemma4TextConfig(
        vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=64,
        intermediate_size=96, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, global_head_dim=32, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
        use_double_wide_mlp=True, sliding_window=4, final_logit_softcapping=30.0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=1)
    return cfg, "gemma4"


# name -> builder returning (transformers config, expected general.architecture of the GGUF)
FAMILIES = {
    "qwen3_moe": build_qwen3_moe,
    "qwen3_5_moe": build_qwen3_5_moe,
    "gemma4_text": build_gemma4_text,
}
# Families whose checkpoint has no MTP block although the config may name one.
CONVERTER_ARGS = {"qwen3_5_moe": ["--no-mtp"]}


# ---- model, tokenizer, conversion -------------------------------------------------------------

def set_weights(model, seed):
    """Every parameter from one seeded generator, in name order: matrices (and 3-D expert stacks)
    ~ N(0, 1/fan_in) with fan_in the last dimension, so activations stay O(1) and router logits
    are ~N(0, 1); 1-D (norm) weights 1 + 0.2 N(0, 1) — 0.2 N(0, 1) where the model's RMSNorm
    multiplies by 1 + w (qwen3_5 family); embeddings N(0, 1) rows. Gated DeltaNet: A_log =
    log U(0.5, 2), dt_bias and the gated norm 1 + 0.2 N (as oracle/gen_gdn_golden.py)."""
    g = torch.Generator().manual_seed(seed)
    one_plus_w = model.config.model_type.startswith("qwen3_5")
    for name, p in sorted(model.named_parameters()):
        if name.endswith("A_log"):
            p.data.copy_(torch.log(0.5 + 1.5 * torch.rand(p.shape, generator=g)))
        elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
            p.data.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:
            p.data.copy_((0.0 if one_plus_w else 1.0) + 0.2 * torch.randn(p.shape, generator=g))
        else:
            p.data.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
        if name.endswith("embed_tokens.weight"):
            p.data.mul_(np.sqrt(p.shape[-1]))
    # Gemma 4's per-layer output scalar is a buffer (ones by default): drawn from U(0.5, 1.5).
    for name, b in sorted(model.named_buffers()):
        if name.endswith("layer_scalar"):
            b.data.copy_(0.5 + torch.rand(b.shape, generator=g))


def bytes_to_unicode():
    """GPT-2's byte -> printable symbol table (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def save_tokenizer(d):
    """A byte-level BPE: ids 0..255 the GPT-2 byte symbols, 256 <|endoftext|>, then the results of
    MERGES (lockstep's and llama.cpp's BPE loaders require tokenizer.ggml.merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    vocab["<|endoftext|>"] = 256
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>")
    fast.save_pretrained(d)


def save_gemma_tokenizer(d):
    """A SentencePiece-style BPE with byte fallback, as Gemma's (llama.cpp's Gemma 4 converter
    reads it with LlamaHfVocab, which requires byte_fallback and a Sequence decoder): <pad> <eos>
    <bos> <unk>, the 256 byte pieces <0x00>..<0xFF>, then pieces up to exactly VOCAB ids."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>"])}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for t in ["\u2581"] + letters:
        vocab[t] = len(vocab)
    merges = [("\u2581", c) for c in letters] + [tuple(p) for p in
                                                 ["th", "he", "in", "er", "an", "re", "on"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == VOCAB, len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>",
                                                eos_token="<eos>", pad_token="<pad>",
                                                unk_token="<unk>")
    fast.save_pretrained(d)


CONVERT_WRAPPER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import convert_hf_to_gguf as conv
from conversion.base import TextModel
# The tiny tokenizer matches no pre-tokenizer hash the converter knows (see the module docstring).
TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
conv.main()
"""


def convert(hf_dir, out_path, name):
    src = os.path.dirname(CONVERTER)
    env = dict(os.environ, PYTHONPATH=os.path.join(src, "gguf-py"))
    cmd = [sys.executable, "-c", CONVERT_WRAPPER, src, hf_dir, "--outtype", "f32", "--outfile",
           out_path, "--model-name", f"tiny-random-{name}"] + CONVERTER_ARGS.get(name, [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"convert_hf_to_gguf.py failed ({r.returncode}):\n{r.stderr[-4000:]}")


def converter_version():
    src = os.path.dirname(CONVERTER)
    try:
        return subprocess.run(["git", "-C", src, "describe", "--always"], capture_output=True,
                              text=True).stdout.strip() or src
    except OSError:
        return src


# ---- oracle runs ------------------------------------------------------------------------------

class RouterMargins:
    """Forward hooks on every MoE router: the smallest gap between the k-th and (k+1)-th logit."""

    def __init__(self, model):
        self.min = float("inf")
        self.hooks = []
        for name, m in model.named_modules():
            if type(m).__name__.endswith("TopKRouter"):
                self.hooks.append(m.register_forward_hook(self.hook))

    def hook(self, module, inputs, outputs):
        logits = outputs[0].detach().float().reshape(-1, module.num_experts)
        top = torch.topk(logits, module.top_k + 1, dim=-1).values
        self.min = min(self.min, float((top[:, -2] - top[:, -1]).min()))


def run_family(name, out_root):
    cfg, arch = FAMILIES[name]()
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                          dtype=torch.float32)
    model.eval()
    set_weights(model, SEED)
    d = os.path.join(out_root, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    margins = RouterMargins(model)
    files = {}
    with tempfile.TemporaryDirectory() as hf_dir:
        model.save_pretrained(hf_dir)
        (save_gemma_tokenizer if arch.startswith("gemma") else save_tokenizer)(hf_dir)
        gguf_name = f"{name}.gguf"
        convert(hf_dir, os.path.join(d, gguf_name), name)
    with torch.no_grad():
        for i, ids in enumerate(PROMPTS):
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            np.save(os.path.join(d, f"logits{i}.npy"), logits.astype(np.float32))
            with open(os.path.join(d, f"prompt{i}.json"), "w") as f:
                json.dump(ids, f)
        # Teacher-forced decode through transformers' cache: prefill, then one token per step.
        out = model(torch.tensor([DECODE_PROMPT]), use_cache=True)
        past = out.past_key_values
        rows = []
        for tok in DECODE_CONTINUATION:
            out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float().numpy())
        np.save(os.path.join(d, "decode_logits.npy"), np.stack(rows).astype(np.float32))
        with open(os.path.join(d, "decode.json"), "w") as f:
            json.dump({"prompt": DECODE_PROMPT, "continuation": DECODE_CONTINUATION}, f)
    if margins.hooks and margins.min <= MIN_ROUTER_MARGIN:
        sys.exit(f"{name}: a router margin of {margins.min} <= {MIN_ROUTER_MARGIN}: pick another seed")
    meta = {"family": name, "general.architecture": arch, "seed": SEED,
            "transformers": transformers.__version__, "torch": torch.__version__,
            "converter": f"{CONVERTER} ({converter_version()}) --outtype f32",
            "min_router_margin": None if not margins.hooks else margins.min,
            "config": json.loads(cfg.to_json_string(use_diff=False))}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for fn in sorted(os.listdir(d)):
        with open(os.path.join(d, fn), "rb") as f:
            files[fn] = hashlib.sha256(f.read()).hexdigest()
    manifest = {
        "generator": "oracle/gen_family_golden.py (CPU torch) -> transformers eager float32 forward; "
                     "GGUF by llama.cpp's convert_hf_to_gguf.py --outtype f32",
        "oracle": "Hugging Face transformers, eager attention, float32",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "converter": meta["converter"], "seed": SEED,
        "tolerances": "engine/core/tolerances.h: kTinyGoldenNmse, kTinyGoldenMaxKl, kGoldenDecisiveMargin",
        "sha256": files}
    with open(os.path.join(d, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(name, "ok:", sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d)), "bytes,",
          "min router margin", meta["min_router_margin"])


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    names = argv[2:] or list(FAMILIES)
    for n in names:
        if n not in FAMILIES:
            sys.exit(f"unknown family {n!r}; known: {', '.join(FAMILIES)}")
        run_family(n, argv[1])


if __name__ == "__main__":
    main(sys.argv)
