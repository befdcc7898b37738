#!/usr/bin/env python3
"""Golden for a multi-token-prediction (MTP / NextN) head drafting for its own model.

The family is Qwen3.5 text (transformers Qwen3_5ForCausalLM, GGUF arch qwen35): llama.cpp
supports its MTP block in the converter (_QwenMtpMixin, conversion/qwen.py), the loader
(src/models/qwen35.cpp load_block_mtp) and its drafting driver (common/speculative.cpp,
common_speculative_impl_draft_mtp names qwen35 as its single-head case); its MTP layer is a
dense full-attention block, so the golden pins the MTP wiring itself rather than a second copy
of the MoE FFN that the qwen3_next golden already covers.

The target is oracle/gen_gdn_golden.py's tiny qwen3_5 (imported, same seed). transformers has
no MTP module (it drops `mtp.*` on load), so the block is assembled here from transformers' own
classes (Qwen3_5RMSNorm, Qwen3_5DecoderLayer with a full-attention layer type) and wired as
vLLM's Qwen3NextMultiTokenPredictor / qwen3_5_mtp.py and llama.cpp's graph_mtp do:

  e = pre_fc_norm_embedding(embed(t[p+1]))       h = pre_fc_norm_hidden(H[p])
  x = fc(concat(e, h))                            # embedding first, then hidden (vLLM
                                                  # torch.cat([inputs_embeds, hidden_states]);
                                                  # llama.cpp ggml_concat(e_norm, h_norm))
  x = decoder_layer(x)  (causal attention over the MTP's own rows, RoPE position p)
  g = norm(x);  logits = lm_head(g)               # predicts t[p+2]

H[p] is the target's final hidden state at position p AFTER the model's final norm (the input of
the LM head): vLLM hands the MTP what Qwen3NextModel.forward returns (self.norm(...)), llama.cpp
its h_nextn tensor (build_norm(output_norm)). Row p sits at RoPE position p (vLLM's EAGLE/MTP
proposer keeps the target positions; llama.cpp uses p + 1, which changes no logit beyond
rounding, RoPE being relative). A draft of K > 1 chains the block on its own output: row p + 1
is (draft token, g of row p) at position p + 1 (vLLM's MTP proposer with one MTP layer;
llama.cpp's draft loop feeds h_row = its h_nextn).

The seeded `mtp.*` weights are added to the saved safetensors under the checkpoint names the
converter expects (mtp.fc, mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.norm,
mtp.layers.0.*), and the model is converted by llama.cpp's convert_hf_to_gguf.py --outtype f32
WITHOUT --no-mtp (blk.8.nextn.*, qwen35.nextn_predict_layers = 1).

The same is written for Qwen3-Next (its tiny target from gen_gdn_golden.py, an MTP layer with
the MoE FFN and gated shared expert of Qwen3NextDecoderLayer), whose block llama.cpp's converter
and graph_mtp (src/models/qwen3next.cpp) support too.

Writes OUT_DIR/<family>_mtp/ for qwen3_5 and qwen3_next:
  <family>_mtp.gguf     the converted target + MTP block
  mtp.json              tokens [N]; chains: [{"context": L, "tokens": [d1..dK]}]
  hidden.npy            [N, d]  the target's post-norm final hidden state per position
  mtp_logits.npy        [N-1, V] row p: the MTP block's logits on (t[p+1], H[p]), all rows
                        0..p true (teacher-forced)
  chain_logits.npy      [n_chains, K, V] the K chained draft logits from context ids[:L]
  MANIFEST.json

Usage: /root/.cache/lockstep/golden-venv/bin/python oracle/gen_mtp_golden.py OUT_DIR [PEER_SRC]
"""
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
from transformers.models.qwen3_next import modeling_qwen3_next as q3n

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_gdn_golden as gdn  # noqa: E402  (the tiny qwen3_5 target, its tokenizer, the converter hook)

N = 40                  # prompt tokens
K = 4                   # chained draft length
CHAIN_CONTEXTS = [12, 25, 40]
MARGIN = 1e-3           # engine/core/tolerances.h kGoldenDecisiveMargin: chain argmaxes decisive


class Mtp(torch.nn.Module):
    """The MTP block from transformers' modules; parameter names are the checkpoint's mtp.*
    (experts aside: see checkpoint_names)."""

    def __init__(self, cfg, family):
        super().__init__()
        mod = q35 if family == "qwen3_5" else q3n
        norm = mod.Qwen3_5RMSNorm if family == "qwen3_5" else mod.Qwen3NextRMSNorm
        layer = mod.Qwen3_5DecoderLayer if family == "qwen3_5" else mod.Qwen3NextDecoderLayer
        self.family = family
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        mcfg = copy.deepcopy(cfg)
        mcfg.layer_types = ["full_attention"]
        mcfg.num_hidden_layers = 1
        self.fc = torch.nn.Linear(2 * d, d, bias=False)
        self.pre_fc_norm_embedding = norm(d, eps=eps)
        self.pre_fc_norm_hidden = norm(d, eps=eps)
        self.layers = torch.nn.ModuleList([layer(mcfg, 0)])
        self.layers[0].self_attn.config._attn_implementation = "eager"
        self.norm = norm(d, eps=eps)

    def forward(self, model, tokens, hidden, positions):
        """tokens [T], hidden [T, d], positions [T]: rows causal over each other.
        Returns (logits [T, V], g [T, d])."""
        emb = model.model.embed_tokens(torch.tensor([tokens]))
        x = torch.cat([self.pre_fc_norm_embedding(emb),
                       self.pre_fc_norm_hidden(hidden[None])], dim=-1)
        x = self.fc(x)
        T = len(tokens)
        pos = torch.tensor(positions)[None]
        # Qwen3.5's interleaved MRoPE takes one position row per section (text: all equal).
        pe = model.model.rotary_emb(x, pos.view(1, 1, -1).expand(3, 1, -1)
                                    if self.family == "qwen3_5" else pos)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        x = self.layers[0](x, position_embeddings=pe, attention_mask=mask, position_ids=pos)
        g = self.norm(x)
        return model.lm_head(g)[0], g[0]


def checkpoint_names(mtp, trunk_saved, trunk_layer):
    """mtp.* tensors as a checkpoint stores them. transformers 5 keeps a layer's experts fused
    (experts.gate_up_proj [E, 2I, d], experts.down_proj [E, d, I]) and writes them per expert
    on save (experts.<e>.{gate,up,down}_proj.weight); the same split is applied here, and checked
    against what save_pretrained wrote for a trunk layer."""
    out = {}
    for name, p in mtp.state_dict().items():
        p = p.detach().clone()
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            inter = p.shape[1] // 2
            for e in range(p.shape[0]):
                out[f"mtp.{base}{e}.gate_proj.weight"] = p[e, :inter].contiguous()
                out[f"mtp.{base}{e}.up_proj.weight"] = p[e, inter:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(p.shape[0]):
                out[f"mtp.{base}{e}.down_proj.weight"] = p[e].contiguous()
        else:
            out["mtp." + name] = p.contiguous()
    fused = dict(trunk_layer.named_parameters())
    if "mlp.experts.gate_up_proj" in fused:
        gu, inter = fused["mlp.experts.gate_up_proj"], fused["mlp.experts.gate_up_proj"].shape[1] // 2
        assert torch.equal(trunk_saved["model.layers.0.mlp.experts.1.gate_proj.weight"], gu[1, :inter])
        assert torch.equal(trunk_saved["model.layers.0.mlp.experts.1.up_proj.weight"], gu[1, inter:])
        assert torch.equal(trunk_saved["model.layers.0.mlp.experts.1.down_proj.weight"],
                           fused["mlp.experts.down_proj"][1])
    return out


def build_mtp(cfg, family, seed):
    torch.manual_seed(seed)
    mtp = Mtp(cfg, family).eval()
    gdn.set_weights(mtp, seed)
    return mtp


def convert_with_mtp(model_dir, out_file, peer):
    env = dict(os.environ, PYTHONPATH=os.path.join(peer, "gguf-py"))
    cmd = [sys.executable, "-c", gdn.CONVERT, peer, os.path.join(peer, "convert_hf_to_gguf.py"),
           model_dir, "--outtype", "f32", "--outfile", out_file]
    subprocess.run(cmd, check=True, env=env)


def add_mtp_to_checkpoint(src, mtp, model):
    path = os.path.join(src, "model.safetensors")
    sd = load_file(path)
    sd.update(checkpoint_names(mtp, sd, model.model.layers[0]))
    save_file(sd, path, metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    c["mtp_num_hidden_layers"] = 1  # as Qwen3.5 checkpoints' config.json carry it
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(c, f, indent=1)


def top2_margin(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def main(out_dir, peer):
    for family in ["qwen3_5", "qwen3_next"]:
        one(out_dir, peer, family)


def one(out_dir, peer, family):
    cfg, model = gdn.build(family)
    mtp = build_mtp(cfg, family, gdn.SEED + 11)
    name = family + "_mtp"
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "tiny-random-" + name)
        model.save_pretrained(src)
        gdn.save_tokenizer(src)
        add_mtp_to_checkpoint(src, mtp, model)
        convert_with_mtp(src, os.path.join(d, name + ".gguf"), peer)

    ids = gdn.prompt_ids(N, gdn.SEED + 13)
    with torch.no_grad():
        H = model.model(torch.tensor([ids]), use_cache=False).last_hidden_state[0]
        # The target's own logits come from H through the LM head: checks that H is its input.
        ref = model(torch.tensor([ids]), use_cache=False).logits[0]
        assert torch.allclose(model.lm_head(H), ref, atol=1e-5), "H is not the LM head's input"
        logits, _ = mtp(model, ids[1:], H[:-1], list(range(N - 1)))
        chains, chain_logits = [], []
        for L in CHAIN_CONTEXTS:
            toks, hid, pos = list(ids[1:L]), [H[p] for p in range(L - 1)], list(range(L - 1))
            drafts, rows = [], []
            for _ in range(K):
                lg, g = mtp(model, toks, torch.stack(hid), pos)
                row = lg[-1].numpy()
                m = top2_margin(row)
                if m < MARGIN:
                    raise SystemExit(f"context {L}: draft {len(drafts)} margin {m} < {MARGIN}")
                t = int(np.argmax(row))
                drafts.append(t)
                rows.append(row)
                toks.append(t)
                hid.append(g[-1])
                pos.append(pos[-1] + 1)
            chains.append({"context": L, "tokens": drafts})
            chain_logits.append(np.stack(rows))
    np.save(os.path.join(d, "hidden.npy"), H.numpy().astype(np.float32))
    np.save(os.path.join(d, "mtp_logits.npy"), logits.numpy().astype(np.float32))
    np.save(os.path.join(d, "chain_logits.npy"), np.stack(chain_logits).astype(np.float32))
    with open(os.path.join(d, "mtp.json"), "w") as f:
        json.dump({"tokens": ids, "chains": chains, "k": K}, f)

    def sha(path):
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()

    files = sorted(f for f in os.listdir(d) if f != "MANIFEST.json")
    manifest = {
        "generator": "oracle/gen_mtp_golden.py (CPU torch); GGUF by llama.cpp's "
                     "convert_hf_to_gguf.py --outtype f32 (with MTP) from " + peer,
        "oracle": "transformers' Qwen3_5ForCausalLM (target, eager, float32) and an MTP block "
                  "built from transformers' Qwen3_5RMSNorm / Qwen3_5DecoderLayer, wired as "
                  "vLLM qwen3_next_mtp.py / llama.cpp graph_mtp (see the script's docstring)",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "seed": gdn.SEED, "mtp_seed": gdn.SEED + 11, "prompt_seed": gdn.SEED + 13,
        "n_tokens": N, "k": K, "chain_contexts": CHAIN_CONTEXTS,
        "config": json.loads(cfg.to_json_string()),
        "tolerances": "engine/core/tolerances.h: kTinyGoldenNmse, kTinyGoldenMaxKl, "
                      "kGoldenDecisiveMargin",
        "sha256": {f: sha(os.path.join(d, f)) for f in files},
    }
    with open(os.path.join(d, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(name, "ok", chains)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else gdn.PEER)
