#!/usr/bin/env python3
"""Writes small GGUF files with the independent `gguf` Python package (gguf-py) plus a JSON of
what each holds, for tests/unit/gguf_py_files_test.cc (values, tensor bytes, byte-identical
Reserialize). Deterministic: fixed seed, fixed content.

    /work/main/.venv/bin/python tests/data/gguf/make_gguf_py_files.py tests/data/gguf
"""
import json
import os
import sys

import numpy as np
import gguf
import gguf.gguf_writer
from gguf import GGMLQuantizationType as Q, GGUFValueType as T

SEED = 20240607


def fnv1a64(b: bytes) -> str:
    h = 0xCBF29CE484222325
    for x in b:
        h ^= x
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class Recorder:
    """Adds to a GGUFWriter and records the expected values/tensors for the JSON."""

    def __init__(self, path, arch, version=3):
        self.path = path
        self.version = version
        self.w = gguf.GGUFWriter(path, arch)
        self.kv = [{"key": "general.architecture", "type": "STRING", "value": arch}]
        self.tensors = []
        self.alignment = 32

    def add(self, key, value, vtype, sub_type=None):
        self.w.add_key_value(key, value, vtype, sub_type=sub_type)
        e = {"key": key, "type": vtype.name, "value": self._jsonable(value, vtype, sub_type)}
        if vtype == T.ARRAY:
            e["elem_type"] = (sub_type if sub_type is not None else T.get_type(value[0])).name
        self.kv.append(e)

    def _jsonable(self, value, vtype, sub_type=None):
        if vtype == T.ARRAY:
            elem = sub_type if sub_type is not None else T.get_type(value[0])  # UINT8 is 0, falsy
            return [self._jsonable(v, elem) for v in value]
        if vtype == T.FLOAT32:
            return float(np.float32(value))
        if vtype == T.BOOL:
            return bool(value)
        return value

    def align(self, a):
        self.w.add_custom_alignment(a)
        self.alignment = a
        self.kv.append({"key": "general.alignment", "type": "UINT32", "value": a})

    def tensor(self, name, array, raw_dtype=None, ggml_type=None):
        self.w.add_tensor(name, array, raw_dtype=raw_dtype)
        info = self.w.tensors[-1][name]
        self.tensors.append({
            "name": name,
            "type": int(info.dtype),
            "shape": [int(x) for x in reversed(info.shape)],  # ggml order
            "n_bytes": int(array.nbytes),
            "fnv1a64": fnv1a64(array.tobytes()),
        })

    def write(self, tensors=True):
        saved = gguf.gguf_writer.GGUF_VERSION
        gguf.gguf_writer.GGUF_VERSION = self.version
        try:
            self.w.write_header_to_file()
            self.w.write_kv_data_to_file()
            if tensors:
                self.w.write_tensors_to_file()
        finally:
            gguf.gguf_writer.GGUF_VERSION = saved
        self.w.close()
        return {"file": os.path.basename(self.path), "version": self.version,
                "alignment": self.alignment, "metadata": self.kv, "tensors": self.tensors,
                "file_size": os.path.getsize(self.path)}


def all_types(out):
    rng = np.random.default_rng(SEED)
    r = Recorder(os.path.join(out, "py_all_types_v3.gguf"), "llama")
    r.add("t.u8", 200, T.UINT8)
    r.add("t.i8", -100, T.INT8)
    r.add("t.u16", 60000, T.UINT16)
    r.add("t.i16", -30000, T.INT16)
    r.add("t.u32", 4000000000, T.UINT32)
    r.add("t.i32", -2000000000, T.INT32)
    r.add("t.f32", 0.1, T.FLOAT32)
    r.add("t.bool", True, T.BOOL)
    r.add("t.bool_false", False, T.BOOL)
    r.add("t.string", "héllo, wörld \u2603 \U0001F600", T.STRING)
    r.add("t.empty_string", "", T.STRING)
    r.add("t.u64", 18000000000000000000, T.UINT64)
    r.add("t.i64", -9000000000000000000, T.INT64)
    r.add("t.f64", 2.718281828459045, T.FLOAT64)
    r.add("a.u8", [1, 2, 255], T.ARRAY, sub_type=T.UINT8)
    r.add("a.i8", [-1, 0, 127], T.ARRAY, sub_type=T.INT8)
    r.add("a.u16", [1, 65535], T.ARRAY, sub_type=T.UINT16)
    r.add("a.i16", [-32768, 32767], T.ARRAY, sub_type=T.INT16)
    r.add("a.u32", [7, 4294967295], T.ARRAY, sub_type=T.UINT32)
    r.add("a.i32", [-5, 5, 1 << 30], T.ARRAY, sub_type=T.INT32)
    r.add("a.f32", [0.5, -1.25, 3.0e-8], T.ARRAY, sub_type=T.FLOAT32)
    r.add("a.bool", [True, False, True], T.ARRAY, sub_type=T.BOOL)
    r.add("a.string", ["<s>", "</s>", "▁the", ""], T.ARRAY, sub_type=T.STRING)
    r.add("a.u64", [0, 1 << 63], T.ARRAY, sub_type=T.UINT64)
    r.add("a.i64", [-(1 << 62), 3], T.ARRAY, sub_type=T.INT64)
    r.add("a.f64", [1e300, -0.0], T.ARRAY, sub_type=T.FLOAT64)
    # gguf-py infers nested element types from the Python values: int -> INT32, str -> STRING.
    r.add("a.nested_int", [[1, 2], [3], [4, 5, 6]], T.ARRAY)
    r.add("a.nested_str", [["a", "bb"], ["ccc"]], T.ARRAY)
    r.add("a.nested3", [[[1], [2, 3]], [[4]]], T.ARRAY)
    r.add("tokenizer.ggml.tokens", [f"tok{i}" for i in range(40)], T.ARRAY, sub_type=T.STRING)

    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    r.tensor("f32.weight", f32)
    r.tensor("f16.weight", rng.standard_normal((2, 7)).astype(np.float16))
    r.tensor("i32.weight", np.arange(9, dtype=np.int32))
    r.tensor("bf16.weight", gguf.quants.quantize(rng.standard_normal((2, 8)).astype(np.float32), Q.BF16), raw_dtype=Q.BF16)
    r.tensor("q4_0.weight", gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), Q.Q4_0), raw_dtype=Q.Q4_0)
    r.tensor("q4_1.weight", gguf.quants.quantize(rng.standard_normal((1, 32)).astype(np.float32), Q.Q4_1), raw_dtype=Q.Q4_1)
    r.tensor("q8_0.weight", gguf.quants.quantize(rng.standard_normal((3, 32)).astype(np.float32), Q.Q8_0), raw_dtype=Q.Q8_0)
    # K-quants: raw block bytes (gguf-py lacks their quantizers); [rows, bytes per row].
    r.tensor("q4_k.weight", rng.integers(0, 256, (2, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    r.tensor("q6_k.weight", rng.integers(0, 256, (1, 210), dtype=np.uint8), raw_dtype=Q.Q6_K)
    return r.write()


def aligned64_v2(out):
    rng = np.random.default_rng(SEED + 1)
    r = Recorder(os.path.join(out, "py_align64_v2.gguf"), "gemma3", version=2)
    r.align(64)
    r.add("gemma3.block_count", 2, T.UINT32)
    r.add("gemma3.rope.freq_base", 10000.0, T.FLOAT32)
    r.tensor("token_embd.weight", rng.standard_normal((3, 3)).astype(np.float32))  # 36 bytes
    r.tensor("blk.0.attn_q.weight", gguf.quants.quantize(rng.standard_normal((1, 32)).astype(np.float32), Q.Q5_0), raw_dtype=Q.Q5_0)
    r.tensor("blk.0.ffn_up.weight", rng.integers(0, 256, (1, 84), dtype=np.uint8), raw_dtype=Q.Q2_K)
    r.tensor("output_norm.weight", np.ones(5, dtype=np.float32))
    return r.write()


def vocab_only(out):
    # Like convert_hf_to_gguf.py --vocab-only: header and metadata, no tensors, no data padding.
    r = Recorder(os.path.join(out, "py_vocab_only.gguf"), "llama")
    r.add("tokenizer.ggml.model", "gpt2", T.STRING)
    r.add("tokenizer.ggml.tokens", ["a", "b", "ab", "abc"], T.ARRAY, sub_type=T.STRING)
    r.add("tokenizer.ggml.merges", ["a b", "ab c"], T.ARRAY, sub_type=T.STRING)
    return r.write(tensors=False)


def no_tensors(out):
    r = Recorder(os.path.join(out, "py_no_tensors.gguf"), "llama")
    r.add("general.name", "empty", T.STRING)
    return r.write()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    files = [all_types(out), aligned64_v2(out), vocab_only(out), no_tensors(out)]
    with open(os.path.join(out, "gguf_py_files.json"), "w") as f:
        json.dump({"generator": f"gguf-py {gguf.__version__ if hasattr(gguf, '__version__') else '0.19.0'}",
                   "seed": SEED, "files": files}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
