#!/usr/bin/env python3
"""Generates golden/quant/*.bin and MANIFEST.json from the gguf Python package (the quant oracle).

Run with the project venv:  .venv/bin/python oracle/gen_quant_golden.py [--out golden/quant]

For every type the package dequantizes (all lockstep codec types except Q8_1 and Q8_K, which the
package lacks) the file holds raw blocks -- random bytes and adversarial ones (zero, 0xFF, special
f16 scales: +-max, NaN, Inf, subnormal, equal quants) -- and the package's float32 output. For
the types it quantizes (F16 via numpy astype, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4) the file
also holds float32 inputs (normal, uniform, zeros, +-0, all-equal, subnormal, huge, outliers,
exact half-step ties, Inf/NaN, MXFP4 log2 boundaries) and the package's quantized bytes.

File layout, all little-endian:
  header, 32 bytes: magic "LSQG", u32 version (1), u32 ggml type id, u32 block_size (elements),
                    u32 type_size (bytes), u32 n_dequant (blocks), u32 n_quant (blocks), u32 0
  dequant_in   u8  [n_dequant * type_size]    raw blocks
  dequant_out  f32 [n_dequant * block_size]   package dequantize output
  quant_in     f32 [n_quant * block_size]     float inputs
  quant_out    u8  [n_quant * type_size]      package quantize output
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import struct
from pathlib import Path

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q

SEED = 20260601
MAGIC = b"LSQG"
VERSION = 1

# type name -> (ggml id, block_size, type_size, byte offsets of f16 scale fields).
# type_size is ggml's (the package agrees for every type it implements).
TYPES = {
    "F32": (0, 1, 4, []),
    "F16": (1, 1, 2, [0]),
    "BF16": (30, 1, 2, []),
    "Q4_0": (2, 32, 18, [0]),
    "Q4_1": (3, 32, 20, [0, 2]),
    "Q5_0": (6, 32, 22, [0]),
    "Q5_1": (7, 32, 24, [0, 2]),
    "Q8_0": (8, 32, 34, [0]),
    "Q2_K": (10, 256, 84, [80, 82]),
    "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]),
    "Q5_K": (13, 256, 176, [0, 2]),
    "Q6_K": (14, 256, 210, [208]),
    "IQ4_NL": (20, 32, 18, [0]),
    "IQ4_XS": (23, 256, 136, [0]),
    "MXFP4": (39, 32, 17, []),
    "NVFP4": (40, 64, 36, []),
}
QUANTIZABLE = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}

# f16 scales that stress the decoders: +-max, NaN (quiet, signalling, negative), +-Inf,
# subnormals, the smallest normal, +-0, +-1.
SPECIAL_F16 = [0x7BFF, 0xFBFF, 0x7E00, 0xFE00, 0x7C01, 0x7DFF, 0x7C00, 0xFC00, 0x0001, 0x8001,
               0x03FF, 0x0400, 0x0000, 0x8000, 0x3C00, 0xBC00, 0x3555]
EQUAL_BYTES = [0x00, 0x11, 0x77, 0x88, 0xAA, 0x55, 0xFF]


def random_blocks(rng, type_size, n):
    return rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)


def set_f16(block, offsets, value):
    for off in offsets:
        block[off:off + 2] = np.frombuffer(struct.pack("<H", value), dtype=np.uint8)


def adversarial_blocks(name, rng):
    """Byte-level edge blocks for a quantized type (see SPECIAL_F16)."""
    _, _, ts, f16 = TYPES[name]
    out = [np.zeros(ts, np.uint8), np.full(ts, 0xFF, np.uint8)]
    if name == "MXFP4":  # every E8M0 exponent, random nibbles; then every equal-nibble pattern
        for e in range(256):
            b = rng.integers(0, 256, ts, dtype=np.uint8)
            b[0] = e
            out.append(b)
        for v in range(16):
            out.append(np.array([127] + [v * 0x11] * 16, np.uint8))
        return out
    if name == "NVFP4":  # every UE4M3 scale byte (4 per block), random and equal nibbles
        for k in range(64):
            b = rng.integers(0, 256, ts, dtype=np.uint8)
            b[:4] = np.arange(4 * k, 4 * k + 4, dtype=np.uint8)
            out.append(b)
        for v in range(16):
            out.append(np.array([0x38, 0x7F, 0xFF, 0x80] + [v * 0x11] * 32, np.uint8))
        return out
    for s in SPECIAL_F16:  # every scale field = s, quants random
        b = rng.integers(0, 256, ts, dtype=np.uint8)
        set_f16(b, f16, s)
        out.append(b)
    for s in SPECIAL_F16[:10]:  # special scale with all-ones quants / scales
        b = np.full(ts, 0xFF, np.uint8)
        set_f16(b, f16, s)
        out.append(b)
    if len(f16) == 2:  # d and dmin/m differ: one special, the other 1.0
        for s in SPECIAL_F16[:8]:
            for first in (True, False):
                b = rng.integers(0, 256, ts, dtype=np.uint8)
                set_f16(b, f16[:1], s if first else 0x3C00)
                set_f16(b, f16[1:], 0x3C00 if first else s)
                out.append(b)
    for v in EQUAL_BYTES:  # all quants (and sub-scales) equal, scale 1.0
        b = np.full(ts, v, np.uint8)
        set_f16(b, f16, 0x3C00)
        out.append(b)
    return out


def elementwise_dequant_inputs(name, rng):
    """F32/F16/BF16 'blocks' are single elements; returned as raw bytes [n, type_size]."""
    if name == "F16":  # exhaustive: every binary16 bit pattern
        return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.uint8).reshape(-1, 2)
    if name == "BF16":
        specials = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0x0001,
                    0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80]
        vals = np.concatenate([np.array(specials, np.uint16),
                               rng.integers(0, 65536, 4096, dtype=np.uint32).astype(np.uint16)])
        return vals.view(np.uint8).reshape(-1, 2)
    specials = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x00000001, 0x007FFFFF, 0x00800000,
                0x7F7FFFFF, 0x3F800000]
    vals = np.concatenate([np.array(specials, np.uint32),
                           rng.integers(0, 2**32, 1024, dtype=np.uint64).astype(np.uint32)])
    return vals.view(np.uint8).reshape(-1, 4)


def tie_blocks(bs):
    """Blocks whose x / d + offset lands exactly on .5 (or on an MXFP4 midpoint): each starts with
    the value that fixes d = 1 (Q4_0: -8, Q4_1: max 15 with min 0, Q5_0: -16, Q5_1: 31, Q8_0: 127)
    and the grid's low end, then the grid in half steps."""
    out = []
    specs = [(-8.0, np.arange(-8, 8, 0.5)), (15.0, np.arange(0, 15.5, 0.5)),
             (-16.0, np.arange(-16, 16, 0.5)), (31.0, np.arange(0, 31.5, 0.5)),
             (127.0, np.arange(-126.5, 127, 1.0))]
    for extreme, grid in specs:
        for k in range(0, len(grid), bs - 2):
            chunk = np.resize(grid[k:k + bs - 2], bs - 2)
            out.append(np.concatenate([[extreme, grid[0]], chunk]).astype(np.float32))
    # MXFP4 midpoints between codes at scale 0.5 (max 4 -> e = 127): 0.25, 0.75, ... 5.0
    mid = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0]
    out.append(np.resize(np.array([4.0] + mid, np.float32), bs))
    return out


def mxfp4_boundary_blocks(bs, rng):
    """Blocks whose max |x| sits just below a power of two, where float32 log2 rounds up to the
    integer: the exponent choice depends on numpy's log2, so cover every such boundary kind."""
    out = []
    for k in [-147, -140, -130, -127, -126, -100, -20, -2, 0, 1, 2, 3, 10, 50, 100, 126, 127]:
        p = np.float32(2.0) ** np.float32(k) if k >= -126 else np.float32(2.0 ** k)
        pbits = int(np.array([p], np.float32).view(np.uint32)[0])
        for j in [0, 1, 2, 5, 11, 12, 20, 44, 45, 100]:
            if pbits - j <= 0:
                continue
            m = np.array([pbits - j], np.uint32).view(np.float32)[0]
            blk = (rng.uniform(-1, 1, bs).astype(np.float32) * m).astype(np.float32)
            blk[rng.integers(0, bs)] = -m if j % 2 else m
            out.append(blk)
    return out


def float_blocks(bs, rng):
    """Float32 inputs for quantize, as [n, bs] (bs = 32 for element types too)."""
    f = np.float32
    cats = []
    cats += [rng.standard_normal(bs).astype(f) for _ in range(48)]
    cats += [(rng.standard_normal(bs) * 1e-3).astype(f) for _ in range(8)]
    cats += [(rng.standard_normal(bs) * 1e3).astype(f) for _ in range(8)]
    cats += [rng.uniform(-1, 1, bs).astype(f) for _ in range(24)]
    # Zeros of one sign per block. When a block's min (max) is a zero and it holds both +0 and -0,
    # which one numpy's reduction returns depends on its SIMD path (AVX2 and AVX-512 machines
    # differ: Q4_1's m of a ReLU-like block came out +0 on one, -0 on the other), so such a
    # block would not regenerate byte-identically everywhere. The draws of the earlier mixed-sign
    # zeros are kept, so that every other block stays as it was.
    cats += [np.zeros(bs, f), np.full(bs, -0.0, f)]
    rng.integers(0, 2, bs)
    for k, sign in enumerate((1, -1, 1, -1, 1, -1)):  # ReLU-like: min (max) is a zero
        rng.integers(0, 2, bs)
        z = np.full(bs, f(-0.0) if k % 3 == 0 else f(0.0), f)
        cats.append(np.where(rng.integers(0, 3, bs) == 0, z, sign * np.abs(rng.standard_normal(bs))).astype(f))
    cats += [np.full(bs, v, f) for v in [1.0, -1.0, 0.3, -7.5, 1e-20, 65504.0, 1e5]]
    cats += [(rng.standard_normal(bs) * 1e-40).astype(f) for _ in range(4)]  # subnormal
    for _ in range(2):  # one subnormal among zeros: 1/d overflows to Inf
        b = np.zeros(bs, f)
        b[rng.integers(0, bs)] = f(1e-44)
        cats.append(b)
    cats += [(rng.standard_normal(bs) * 1e-38).astype(f) for _ in range(2)]
    cats += [(rng.standard_normal(bs) * 1e30).astype(f) for _ in range(2)]
    cats += [(rng.uniform(-1, 1, bs) * 3.4e38).astype(f) for _ in range(2)]
    cats += [(rng.standard_normal(bs) * 70000).astype(f) for _ in range(2)]  # f16 overflow
    for sign in (1, -1, 1, -1):  # single outlier
        b = rng.standard_normal(bs).astype(f)
        b[rng.integers(0, bs)] = f(sign * 1000.0)
        cats.append(b)
    cats += tie_blocks(bs)
    for special in ([np.inf], [-np.inf], [np.nan], [np.inf, np.nan], [np.inf, -np.inf]):
        b = rng.standard_normal(bs).astype(f)
        b[rng.choice(bs, len(special), replace=False)] = special
        cats.append(b)
    cats += mxfp4_boundary_blocks(bs, rng)
    return np.stack(cats).astype(f)


def fp16_rounding_cases(rng):
    """f32 values for f32 -> f16 rounding: ties and their neighbours at every exponent,
    subnormal/zero and overflow boundaries, NaN payloads, random bit patterns."""
    u = []
    hs = np.concatenate([np.arange(0, 0x7C00, 97), np.arange(0x0000, 0x0010), np.arange(0x03F0, 0x0410),
                         np.arange(0x7BF0, 0x7C00)]).astype(np.uint32)
    for h in hs:
        lo = int(np.array([h], np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[0])
        hi = int(np.array([h + 1], np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[0])
        mid = (lo + hi) // 2 if h != 0 else 0x33000000  # 2^-25: half the smallest subnormal
        u += [mid - 1, mid, mid + 1, lo]
    u += [0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000, 0x7F7FFFFF, 0x7F800000,
          0x32FFFFFF, 0x33000000, 0x33000001, 0x33400000, 0x387FFFFF, 0x38800000, 0x00000001]
    for payload in [1, 0x1FFF, 0x2000, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF, 0x2AAAAA, 0x155555]:
        u += [0x7F800000 | payload]
    u += list(rng.integers(0, 2**32, 8192, dtype=np.uint64))
    u = np.array(u, np.uint64).astype(np.uint32)
    u = np.concatenate([u, u | np.uint32(0x80000000)])
    return u.view(np.float32)


def package_dequant(name, raw):
    return np.asarray(quants.dequantize(raw, Q[name]), np.float32).reshape(raw.shape[0], -1)


def package_quant(name, x):
    out = quants.quantize(x, Q[name])
    return np.ascontiguousarray(out).view(np.uint8).reshape(x.shape[0], -1)


def build(name):
    tid, bs, ts, _ = TYPES[name]
    seed = SEED + tid
    rng = np.random.default_rng(seed)
    counts = {}
    if bs == 1:
        raw = elementwise_dequant_inputs(name, rng)
        counts["dequant_elements"] = int(raw.shape[0])
    else:
        n_rand = 40 if bs == 256 else 256
        adv = adversarial_blocks(name, rng)
        raw = np.concatenate([random_blocks(rng, ts, n_rand), np.stack(adv)])
        counts["dequant_random_blocks"] = n_rand
        counts["dequant_adversarial_blocks"] = len(adv)
    with np.errstate(all="ignore"):
        deq = package_dequant(name, raw)
    assert deq.shape == (raw.shape[0], bs) and raw.shape[1] == ts
    qin = np.zeros((0, bs), np.float32)
    qout = np.zeros((0, ts), np.uint8)
    if name in QUANTIZABLE:
        fb = float_blocks(32, rng)
        if bs == 1:
            extra = fp16_rounding_cases(rng) if name == "F16" else \
                rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
            qin = np.concatenate([fb.reshape(-1), extra]).reshape(-1, 1)
        else:
            qin = fb
        with np.errstate(all="ignore"):
            qout = package_quant(name, qin)
        assert qout.shape == (qin.shape[0], ts)
        counts["quant_blocks"] = int(qin.shape[0])
    header = MAGIC + struct.pack("<7I", VERSION, tid, bs, ts, raw.shape[0], qin.shape[0], 0)
    body = b"".join(a.astype(a.dtype.newbyteorder("<")).tobytes() for a in
                    (raw, deq, qin.astype(np.float32), qout))
    return header + body, seed, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "golden" / "quant"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name in TYPES:
        data, seed, counts = build(name)
        path = out / f"{name}.bin"
        path.write_bytes(data)
        files.append({"file": path.name, "type": name, "type_id": TYPES[name][0],
                      "block_size": TYPES[name][1], "type_size": TYPES[name][2], "seed": seed,
                      "counts": counts, "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
        print(f"{name:7s} {len(data):8d} bytes {counts}")
    manifest = {
        "generator": "oracle/gen_quant_golden.py",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "base_seed": SEED,
        "format": "see the docstring of oracle/gen_quant_golden.py (header 32 bytes, 'LSQG' v1)",
        "not_covered_by_package": {"Q8_1": "no dequantize in gguf-py; independent reference in oracle/",
                                   "Q8_K": "no dequantize in gguf-py; independent reference in oracle/"},
        "files": files,
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"total {sum(f['bytes'] for f in files)} bytes in {len(files)} files")


if __name__ == "__main__":
    main()
