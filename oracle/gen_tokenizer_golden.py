#!/usr/bin/env python3
"""Generates golden/tokenizer/<model>.json and MANIFEST.json: token ids from Hugging Face
`tokenizers`, built from each GGUF's tokenizer metadata the way `transformers` converts a GGUF;
and golden/tokenizer/pretokenize.json: the words each byte-level pre-tokenizer regex (GPT-2,
GPT-2 + isolated digits, Llama 3, Qwen2) splits strings into, from the `tokenizers` regex engine.

Not needed by CI (the outputs are committed). Needs its own venv:
  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install transformers tokenizers gguf numpy
  /tmp/tokvenv/bin/python oracle/gen_tokenizer_golden.py [--models-dir ~/.cache/lockstep/models]

How the oracle tokenizer is built (and where it departs from a stock call):
  - `AutoTokenizer.from_pretrained(dir, gguf_file=...)` needs torch (transformers' GGUF reader
    imports it) even for a tokenizer, so the metadata is read with the `gguf` package and handed
    to transformers' own converter, `integrations.gguf.gguf_tokenizer_mapping
    .convert_gguf_tokenizer` -- the function from_pretrained calls after reading.
  - tokenizer.ggml.pre = smollm (and starcoder/refact/codeshell): transformers' table has no
    entry and leaves GPT-2's ByteLevel regex, while the model's own tokenizer.json and llama.cpp
    isolate every digit first (Digits(individual_digits=True) + ByteLevel). The oracle uses the
    tokenizer.json shape; the ids of the stock conversion are compared too and any string where
    they differ is listed under "stock_conversion_differs" (SmolLM2's merges hold no digits, so
    none is expected).
  - parse_special=false is `encode_special_tokens = True` (CONTROL tokens go through the model;
    USER_DEFINED ones, added as non-special tokens, are still matched whole).
  - BOS: the converter's post-processor adds none; the ids here get tokenizer.ggml.bos_token_id
    prepended when tokenizer.ggml.add_bos_token is true (transformers' default for "llama":
    true), as the engine's Encode(add_bos = add_bos_default()) does.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gguf  # noqa: E402
from tokenizers import Regex, pre_tokenizers  # noqa: E402
from transformers.integrations.gguf.gguf_tokenizer_mapping import (  # noqa: E402
    _LLAMA3_SPLIT,
    _QWEN2_SPLIT,
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)

MODELS = {
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}
DIGIT_ISOLATING_PRE = {"smollm", "starcoder", "refact", "codeshell"}

LONG_PARAGRAPH = (
    "The history of computing is a story of abstractions stacked on abstractions. In the 1940s, "
    "programmers wired plugboards by hand; by the 1950s, assemblers let them write mnemonics "
    "instead of raw opcodes. FORTRAN (1957) and COBOL (1959) raised the level again, and each "
    "step was met with the same objection: \"the compiler will never be as fast as a careful "
    "human.\" It wasn't, at first. Yet 60 years later, few people write assembly by hand, and "
    "those who do usually check their work against what the compiler emits. Tokenizers are a "
    "small, unglamorous layer in that stack -- but if one byte differs, the model sees a "
    "different prompt, and every guarantee above it (caching, batching, speculative decoding) "
    "is quietly void. So we test it: 3.14159, 2^10 = 1024, e-mail: someone@example.com, "
    "URL https://example.org/path?q=1&r=2#frag, and a price of $1,299.99 (incl. 20% VAT). "
    "Naïve café-goers in Zürich pay 4.50 CHF; in Kraków it's 12 zł; in 東京 it's ¥500. "
) * 3

CORPUS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "a   b    c",
    "tabs\tand\t\ttabs",
    "\t\tindented with tabs",
    "line one\nline two\n\n\nline five",
    "windows\r\nline\r\nendings\r\n",
    "mixed \n \n  \t\n end",
    "\n",
    "   ",
    "don't can't won't it's I'm you're we've they'll he'd",
    "DON'T I'LL YOU'RE WE'VE SHE'D IT'S",
    "'s 't 're 've 'm 'll 'd",
    "1234567",
    "1,234,567.89 and 3.14159 and 2024-01-15",
    "x² ½ Ⅻ ٣٤٥ ４５６",
    "Café naïve résumé façade Ångström",
    "e\u0301 combining acute, n\u0303 tilde, a\u0308\u0304 stacked",
    "Ελληνικά και русский язык",
    "مرحبا بالعالم",
    "שלום עולם",
    "Mixed RTL: hello مرحبا world עולם 123",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다. 안녕하세요!",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "हिन्दी में लिखा गया वाक्य।",
    "emoji 😀 🎉 👍",
    "👍🏽 skin tone, 👩🏾‍💻 ZWJ, 👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 flag and 🇯🇵 regional indicators",
    "zero\u200bwidth\u200dspace and\u00a0nbsp and\u3000ideographic",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\n\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "if (a && b || !c) { x->y = z[0]; } // comment",
    "SELECT * FROM users WHERE id = 42;",
    "<html><body><table><tr><td>cell</td></tr></table></body></html>",
    "<s>sentence</s> <b>bold</b>",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|",
    "<<|im_start|>>",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>",
    "<pad><eos><unk><mask>[multimodal]",
    "<unused0> and <unused99>",
    "<0x41> literal byte token text",
    "▁ literal lower one eighth block ▁▁",
    "Ġ and Ċ and ĉ (GPT-2 alphabet characters)",
    "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
    "...---...!!!???",
    "CamelCaseIdentifier snake_case_identifier kebab-case-identifier",
    "https://example.com/a/b?c=d&e=f",
    "ALL CAPS SENTENCE WITH NUMBERS 42 AND SYMBOLS!",
    "\u017f's long s contraction and Kelvin \u212a",
    "\u0085next line and \u2028line sep \u2029para sep",
    "control \x01\x02\x7f chars",
    "bytes SmolLM2 has no symbol for: \x04 \x06 \x1d (dropped)",
    "a" * 300,
    "ab" * 200 + " " + "1" * 50,
    LONG_PARAGRAPH,
]


# The byte-level pre-tokenizer regexes (engine/tokenizer/unicode.h), checked on their own against
# the `tokenizers` regex engine over the corpus plus these, into pretokenize.json.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
SPLITS = {
    "gpt2": [pre_tokenizers.Split(Regex(GPT2_SPLIT), behavior="isolated")],
    "gpt2+isolated-digits": [pre_tokenizers.Digits(individual_digits=True),
                             pre_tokenizers.Split(Regex(GPT2_SPLIT), behavior="isolated")],
    "llama3": [pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated")],
    "qwen2": [pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated")],
}
SPLIT_EXTRA = [
    "Hello123world 4567 89 1234567890", "\t\tfoo\tbar", "a\n\n b", "x  \n  y\r\n\r\n  z",
    "'S 'LL 'Re 'vE 'D", "\u017f's", "(hello) [world] {x}", " 'quoted' ", "a.\n\nb!\r\n",
    "  \u00a0 \u3000x", "$$$ 100%", "e\u0301\u0301x \u0301y", "   \n", "\n   ", "x\t\n",
]


def read_tokenizer_metadata(path: Path) -> dict:
    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items()
            if k.startswith("tokenizer.") or k == "general.architecture"}


def build(md: dict, digits: bool):
    mapping = GGUF_TOKENIZER_MAPPING["tokenizer"]
    tokenizer_dict = {v: md[f"tokenizer.{k}"] for k, v in mapping.items() if f"tokenizer.{k}" in md}
    backend, _ = convert_gguf_tokenizer(md["general.architecture"], tokenizer_dict)
    if digits:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    return backend


def encode(backend, text: str, parse_special: bool, bos: list[int]) -> list[int]:
    backend.encode_special_tokens = not parse_special
    return bos + backend.encode(text, add_special_tokens=False).ids


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/lockstep/models"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "golden/tokenizer"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    versions = {p: importlib.metadata.version(p) for p in ("transformers", "tokenizers", "gguf")}
    assert len(CORPUS) >= 60, len(CORPUS)
    manifest = {"generator": "oracle/gen_tokenizer_golden.py", "versions": versions,
                "python": sys.version.split()[0], "files": []}
    for name, file in MODELS.items():
        path = Path(args.models_dir) / file
        md = read_tokenizer_metadata(path)
        pre = md.get("tokenizer.ggml.pre", "default")
        digits = md["tokenizer.ggml.model"] == "gpt2" and pre in DIGIT_ISOLATING_PRE
        backend = build(md, digits)
        stock = build(md, False) if digits else None
        add_bos = bool(md.get("tokenizer.ggml.add_bos_token",
                              md["tokenizer.ggml.model"] == "llama"))
        bos = [int(md["tokenizer.ggml.bos_token_id"])] if add_bos else []
        cases, differs, n_tokens = [], [], 0
        for i, text in enumerate(CORPUS):
            ids_special = encode(backend, text, True, bos)
            ids_plain = encode(backend, text, False, bos)
            if stock is not None and (encode(stock, text, True, bos) != ids_special or
                                      encode(stock, text, False, bos) != ids_plain):
                differs.append(i)
            body = ids_special[len(bos):]
            roundtrip = backend.decode(body, skip_special_tokens=False) == text
            cases.append({"text": text, "ids_parse_special": ids_special, "ids_plain": ids_plain,
                          "hf_decode_roundtrip": roundtrip})
            n_tokens += len(ids_special) + len(ids_plain)
        pipeline = json.loads(backend.to_str())
        golden = {
            "model": name,
            "model_file": file,
            "model_sha256": sha256(path),
            "generator": manifest["generator"],
            "versions": versions,
            "tokenizer": {
                "ggml_model": md["tokenizer.ggml.model"],
                "pre": pre,
                "architecture": md["general.architecture"],
                "vocab_size": len(md["tokenizer.ggml.tokens"]),
                "add_bos": add_bos,
                "bos_id": int(md["tokenizer.ggml.bos_token_id"]),
                "oracle_pre_tokenizer": pipeline["pre_tokenizer"],
                "oracle_normalizer": pipeline["normalizer"],
                "oracle_decoder": pipeline["decoder"],
                "digits_isolated_like_tokenizer_json": digits,
                "stock_conversion_differs": differs,
            },
            "cases": cases,
        }
        dest = out / f"{name}.json"
        dest.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        manifest["files"].append({
            "file": dest.name, "model_file": file, "model_sha256": golden["model_sha256"],
            "strings": len(cases), "tokens": n_tokens, "sha256": sha256(dest),
        })
        print(f"{dest}: {len(cases)} strings, {n_tokens} tokens, stock differs on {differs}, "
              f"HF round-trip fails on {[i for i, c in enumerate(cases) if not c['hf_decode_roundtrip']]}")
    split_cases = []
    for text in CORPUS + SPLIT_EXTRA:
        words = {}
        for name, steps in SPLITS.items():
            pieces = [text]
            for step in steps:
                pieces = [w for p in pieces for w, _ in step.pre_tokenize_str(p)]
            assert "".join(pieces) == text
            words[name] = pieces
        split_cases.append({"text": text, "words": words})
    dest = out / "pretokenize.json"
    dest.write_text(json.dumps({"generator": manifest["generator"], "versions": versions,
                                "regexes": {"gpt2": GPT2_SPLIT, "llama3": _LLAMA3_SPLIT,
                                            "qwen2": _QWEN2_SPLIT},
                                "cases": split_cases}, ensure_ascii=False, indent=1) + "\n",
                    encoding="utf-8")
    manifest["files"].append({"file": dest.name, "strings": len(split_cases),
                              "pre_tokenizers": list(SPLITS), "sha256": sha256(dest)})
    print(f"{dest}: {len(split_cases)} strings x {len(SPLITS)} pre-tokenizers")
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
