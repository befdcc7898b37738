#!/usr/bin/env python3
"""Writes the seed corpus for fuzz/gguf_fuzz.cc into fuzz/corpus/gguf/: small valid GGUFs
(v2, v3, every value type, nested arrays, several tensor types, custom alignments, vocab-only)
and broken ones (truncated at many points, bad magic, huge counts, each validation rule).
Plain Python, no dependencies; deterministic.

    python3 fuzz/make_corpus.py fuzz/corpus/gguf
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block size, bytes per block)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144),
         14: (256, 210), 30: (1, 2), 24: (1, 1), 39: (32, 17)}


def s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def value(t, v, sub=None):
    if t == STR:
        return s(v)
    if t == ARR:
        out = struct.pack("<IQ", sub[0], len(v))
        for item in v:
            out += value(sub[0], item, sub[1:] if len(sub) > 1 else None)
        return out
    return struct.pack(SCALAR[t], v)


def kv(key, t, v, sub=None):
    return s(key) + struct.pack("<I", t) + value(t, v, sub)


def gguf(kvs, tensors, version=3, alignment=32, pad_empty=True, n_kv=None, n_tensors=None):
    """tensors: (name, shape, type, data); offsets laid out like llama.cpp (aligned, padded)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs)
    off = 0
    for name, shape, t, data in tensors:
        out += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", t, off)
        off += (len(data) + alignment - 1) // alignment * alignment
    if tensors or pad_empty:
        out += b"\0" * (-len(out) % alignment)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % alignment)
    return out


def tensor(name, shape, t, fill=1):
    n = 1
    for d in shape:
        n *= d
    bs, ts = TYPES[t]
    return (name, shape, t, bytes((fill + i) & 0xFF for i in range(n // bs * ts)))


def every_value_type():
    return [
        kv(b"general.architecture", STR, b"llama"),
        kv(b"u8", U8, 200), kv(b"i8", I8, -3), kv(b"u16", U16, 65535), kv(b"i16", I16, -2),
        kv(b"u32", U32, 7), kv(b"i32", I32, -7), kv(b"f32", F32, 0.5), kv(b"bool", BOOL, True),
        kv(b"str", STR, "h\u00e9llo \u2603".encode()), kv(b"u64", U64, 2**64 - 1),
        kv(b"i64", I64, -(2**63)), kv(b"f64", F64, 1e-300),
        kv(b"a.u8", ARR, [1, 2, 3], [U8]), kv(b"a.f32", ARR, [1.0, -2.0], [F32]),
        kv(b"a.str", ARR, [b"<s>", b"", b"\xff\xfe"], [STR]),
        kv(b"a.bool", ARR, [True, False], [BOOL]), kv(b"a.i64", ARR, [-1], [I64]),
        kv(b"a.empty", ARR, [], [U32]),
        kv(b"a.nested", ARR, [[1, 2], [3]], [ARR, I32]),
        kv(b"a.nested_str", ARR, [[b"x"], []], [ARR, STR]),
        kv(b"a.deep", ARR, [[[[[[[[7]]]]]]]], [ARR] * 7 + [U8]),
    ]


def several_tensors():
    return [tensor(b"f32", [4, 2], 0), tensor(b"f16", [3], 1), tensor(b"q4_0", [64], 2),
            tensor(b"q4_1", [32, 2], 3), tensor(b"q8_0", [32], 8), tensor(b"q4_k", [256], 12),
            tensor(b"q6_k", [256], 14), tensor(b"bf16", [2, 2, 2, 1], 30), tensor(b"i8", [5], 24),
            tensor(b"mxfp4", [32], 39)]


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "gguf")
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    base = gguf(every_value_type(), several_tensors())
    files["valid_v3_all"] = base
    files["valid_v2"] = gguf(every_value_type()[:5], several_tensors()[:3], version=2)
    files["valid_align64"] = gguf([kv(b"general.alignment", U32, 64)], several_tensors()[:4], alignment=64)
    files["valid_align1"] = gguf([kv(b"general.alignment", U32, 1)], several_tensors()[:4], alignment=1)
    files["valid_vocab_only"] = gguf([kv(b"tokenizer.ggml.tokens", ARR, [b"a", b"b"], [STR])], [],
                                     pad_empty=False)
    files["valid_no_tensors"] = gguf([kv(b"general.name", STR, b"x")], [])
    files["valid_scalar_tensor"] = gguf([], [(b"s", [], 0, b"\0\0\x80\x3f")])
    files["valid_empty"] = gguf([], [])
    files["valid_long_string"] = gguf([kv(b"tokenizer.chat_template", STR, b"{% x %}" * 40)], [])
    files["valid_nan"] = gguf([kv(b"nan", F32, float("nan")),
                               s(b"snan") + struct.pack("<II", F32, 0x7FA00001)], [])

    # Truncations of the full file at many points (header, metadata, infos, data).
    for cut in list(range(0, 64, 5)) + list(range(64, len(base), max(1, len(base) // 40))):
        files[f"trunc_{cut:05d}"] = base[:cut]

    hdr = lambda nt, nkv, v=3: b"GGUF" + struct.pack("<IQQ", v, nt, nkv)
    files["bad_magic"] = b"GGML" + base[4:]
    files["bad_version1"] = b"GGUF" + struct.pack("<III", 1, 0, 0)
    files["bad_version4"] = hdr(0, 0, 4)
    files["bad_big_endian"] = hdr(0, 0, 0x03000000)
    files["huge_n_kv"] = hdr(0, 2**60) + b"\0" * 64
    files["huge_n_tensors"] = hdr(2**60, 0) + b"\0" * 64
    files["huge_key_len"] = hdr(0, 1) + struct.pack("<Q", 9999999) + b"k" * 16
    files["huge_string_len"] = hdr(0, 1) + s(b"k") + struct.pack("<IQ", STR, 2**63) + b"x" * 16
    files["huge_array_count"] = hdr(0, 1) + s(b"k") + struct.pack("<IIQ", ARR, U32, 2**60) + b"\0" * 64
    files["huge_string_array"] = hdr(0, 1) + s(b"k") + struct.pack("<IIQ", ARR, STR, 10**6) + b"\0" * 64
    files["deep_nesting_9"] = hdr(0, 1) + s(b"k") + struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1) * 8 + struct.pack("<IQB", U8, 1, 5)
    files["bad_value_type"] = hdr(0, 1) + s(b"k") + struct.pack("<I", 13) + b"\0" * 8
    files["bad_elem_type"] = hdr(0, 1) + s(b"k") + struct.pack("<IIQ", ARR, 99, 1) + b"\0" * 8
    files["align_zero"] = gguf([kv(b"general.alignment", U32, 0)], [])
    files["align_48"] = gguf([kv(b"general.alignment", U32, 48)], [])
    files["align_i32"] = gguf([kv(b"general.alignment", I32, 32)], [])
    files["align_huge"] = gguf([kv(b"general.alignment", U32, 2**31)], [], pad_empty=False)
    files["dup_key"] = gguf([kv(b"a", U8, 1), kv(b"a", U8, 2)], [])
    files["dup_tensor"] = gguf([], [tensor(b"w", [4], 0), tensor(b"w", [4], 0)])
    files["n_dims_5"] = gguf([], [tensor(b"w", [1, 1, 1, 1, 1], 0)])
    files["dim_zero"] = gguf([], [(b"w", [4, 0], 0, b"")])
    files["dim_negative"] = gguf([], [(b"w", [2**64 - 1], 0, b"")])
    files["shape_overflow"] = gguf([], [(b"w", [2**40, 2**30], 0, b"")])
    files["type_unknown_4"] = gguf([], [(b"w", [32], 4, b"\0" * 18)])
    files["type_unknown_99"] = gguf([], [(b"w", [32], 99, b"\0" * 18)])
    files["block_mismatch"] = gguf([], [(b"w", [48], 2, b"\0" * 18)])
    good = gguf([], [tensor(b"a", [8], 0), tensor(b"b", [8], 0)])
    info_b = good.index(b"\x01\x00\x00\x00\x00\x00\x00\x00b") + 9
    off_b = info_b + 4 + 8 + 4  # n_dims, ne0, type -> offset field
    patch = lambda b, at, v: b[:at] + struct.pack("<Q", v) + b[at + 8:]
    files["misaligned"] = patch(good, off_b, 8)
    files["overlap"] = patch(good, off_b, 0)
    files["past_eof"] = patch(good, off_b, 4096)
    files["offset_wrap"] = patch(good, off_b, 2**64 - 32)
    files["swapped_order"] = patch(patch(good, off_b, 0), off_b - 33, 32)  # a's offset field
    files["nonzero_padding"] = good[:-1] + b"\x7f"
    files["trailing_bytes"] = good + b"trailing"
    files["data_section_past_eof"] = gguf([], [tensor(b"w", [1], 0)])[:57]  # infos end at 57

    for name, data in files.items():
        with open(os.path.join(out_dir, name + ".gguf"), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files, {sum(map(len, files.values()))} bytes to {out_dir}")


if __name__ == "__main__":
    main()
