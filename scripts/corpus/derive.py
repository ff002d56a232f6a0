#!/usr/bin/env python3
"""Make the derived members of the Brevis benchmark corpus from the real F32 MiniLM checkpoint.

usage: derive_corpus.py MODE SRC.safetensors DST.safetensors
  bf16    every F32 tensor rounded to BF16 (round to nearest, ties to even)
  fp8     2-D F32 tensors quantised to F8_E4M3 (e4m3fn) with a scalar F32 '<name>_scale'
          tensor (max|w| / 448) placed right after each; other F32 tensors become BF16
  upcast  every F32 tensor rounded to BF16 and widened back to F32 (low 16 bits zero)
  dequant4 2-D F32 tensors quantised to 4 bits per group of 64 values along a row
          (symmetric, scale = max|w| / 7 rounded to BF16, q = round(w / scale) in
          -8..7) and stored back as BF16(scale * q), as a checkpoint dequantised for
          fine-tuning is; other F32 tensors become BF16
  dequant8 2-D F32 tensors quantised to 8 bits per row (symmetric, scale = max|row| / 127
          rounded to BF16) and stored back as BF16(scale * q); other F32 tensors become BF16
  q8_0    2-D F32 tensors quantised to GGUF Q8_0 by gguf-py (llama.cpp's own numpy port,
          bit-exact with ggml-quants.c) and stored as U8 rows of 34-byte blocks (an F16
          scale, then 32 int8), shape [rows, cols / 32 * 34]; other tensors copied
  q4_0    the same with GGUF Q4_0: 18-byte blocks (an F16 scale, then 16 bytes of
          nibbles: element j in the low nibble of byte j, element j + 16 in the high)
  q5_0    the same with GGUF Q5_0: 22-byte blocks (an F16 scale, 4 bytes of fifth bits,
          16 bytes of low nibbles)
  q4_k    GGUF Q4_K super-blocks of 256 values (144 bytes: F16 d and dmin, 12 bytes of
          6-bit scales and mins, 128 bytes of nibbles), made here by a numpy port of
          llama.cpp's reference quantize_row_q4_K_ref (gguf-py does not quantize K-quants;
          F32 sums in another order may round a rare level otherwise); tensors whose rows
          are not whole super-blocks take Q5_0, as llama.cpp's quantize does
  q5_k    the same with Q5_K (176 bytes: d, dmin, scales[12], qh[32], qs[128]); Q5_1 where
          rows are not whole super-blocks
  q6_k    the same with Q6_K (210 bytes: ql[128], qh[64], 16 int8 scales, F16 d last); Q8_0
          where rows are not whole super-blocks
  mxfp4   2-D F32 tensors quantised to MXFP4 by gguf-py's quantizer (OCP MX: one E8M0
          scale per 32 values, floor(log2(max|w|)) - 2, and FP4 E2M1 values) and laid out
          as gpt-oss ships them in safetensors: '<name>_blocks' U8 [rows, cols / 32, 16]
          (element 2i in the low nibble of byte i, 2i + 1 in the high) and '<name>_scales'
          U8 [rows, cols / 32] (the E8M0 exponents, bias 127); other tensors copied
  gptq    2-D F32 '*.weight' tensors of linear layers (not embeddings) quantised to 4 bits
          per group of 128 inputs (GPTQ's symmetric grid: scale = 2 max|w| / 15, zero 8,
          rounded to nearest, without GPTQ's error feedback) and stored as AutoGPTQ writes
          them: '<layer>.qweight' I32 [in / 8, out] (input 8i + j in bits 4j..4j+3),
          '<layer>.qzeros' I32 [in / 128, out / 8] (zero - 1, packed along outputs),
          '<layer>.scales' F16 [in / 128, out] and '<layer>.g_idx' I32 [in]; other F32
          tensors become F16
  awq     the same linear layers quantised to 4 bits per group of 128 inputs, asymmetric
          (scale = (max - min) / 15 as F16, zero = round(-min / scale) in 0..15, round to
          nearest, without AWQ's activation-aware search, which needs calibration data) and
          stored as AutoAWQ's GEMM layout writes them: '<layer>.qweight' I32 [in, out / 8]
          and '<layer>.qzeros' I32 [in / 128, out / 8], each word 8 outputs in AWQ's order
          (output 8c + [0, 2, 4, 6, 1, 3, 5, 7][j] in bits 4j..4j+3), '<layer>.scales' F16
          [in / 128, out]; other F32 tensors become F16
  nf4     the same linear layers as bitsandbytes' NF4 (blocks of 64 values of the flattened
          [out, in] weight, absmax F32 per block, each value the nearest of NF4's 16 codes
          of w / absmax; no double quantization) and stored as transformers saves a 4-bit
          model: '<layer>.weight' U8 [n / 2, 1] (value 2i in the high nibble of byte i, 2i + 1
          in the low), '.weight.absmax' F32 [n / 64], '.weight.quant_map' F32 [16] and
          '.weight.quant_state.bitsandbytes__nf4' U8 (its JSON); other F32 tensors become F16
  positions every F32 tensor as F16, and a sinusoidal position table appended as
          speech models store their encoder's: 'encoder.embed_positions.weight' F16
          [1500, 384], row t the sines then the cosines of t times 192 frequencies
          10000^(-j / 191) (Whisper's formula, in float32, rounded to F16)
  int8    2-D F32 weights as onnxruntime's quantize_dynamic writes them with QUInt8 weights
          (asymmetric: range widened to hold 0, scale = (max - min) / 255, zero point
          round(-min / scale)): a linear layer's as its MatMul initializer, transposed to
          [in, out], per output channel ('<name>_quantized' U8 [in, out], '<name>_scale' F32
          [out], '<name>_zero_point' U8 [out]); an embedding per tensor (U8 [rows, cols], F32
          and U8 scalars); other tensors copied

Tensors that are not F32 are copied byte for byte. Output tensors are laid out in the
order of the source's data offsets, the header is compact JSON padded with spaces to a
multiple of 8 bytes, and "__metadata__" (last key) gains a "derived" note. Needs numpy, and
the gguf package (pip install gguf) for the GGUF modes and mxfp4.
"""
import json
import os
import struct
import sys

import numpy as np


def load(path):
    """Return (metadata dict, [(name, dtype, shape, raw bytes)]) in data-offset order."""
    with open(path, "rb") as fh:
        blob = fh.read()
    (hlen,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8 : 8 + hlen])
    meta = header.pop("__metadata__", {})
    start = 8 + hlen
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    tensors = []
    for name, info in entries:
        lo, hi = info["data_offsets"]
        tensors.append((name, info["dtype"], info["shape"], blob[start + lo : start + hi]))
    return meta, tensors


def save(path, meta, tensors):
    header = {}
    pos = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for tensor in tensors:
            fh.write(tensor[3])
    os.replace(tmp, path)


def to_bf16(raw):
    """F32 bytes -> BF16 bit patterns (uint16), round to nearest, ties to even."""
    bits = np.frombuffer(raw, dtype="<u4").astype(np.uint64)
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    return ((bits + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype("<u2")


def to_e4m3fn(x):
    """float32 array -> float8 e4m3fn bytes (bias 7, no infinities, max 448), round to
    nearest even; out-of-range magnitudes become NaN (0x7F), as a non-saturating cast does."""
    x = np.ascontiguousarray(x, dtype="<f4")
    bits = x.view("<u4")
    sign = ((bits >> 31).astype(np.uint8)) << 7
    mag_bits = bits & np.uint32(0x7FFFFFFF)
    # Normal range of e4m3 (|x| >= 2**-6): round the 23-bit mantissa to 3 bits on the raw
    # pattern (a carry rolls into the exponent), then rebias the exponent from 127 to 7.
    keep_lsb = (mag_bits >> 20) & np.uint32(1)
    rounded = (mag_bits.astype(np.uint64) + np.uint64(0x7FFFF) + keep_lsb) >> np.uint64(20)
    normal = rounded.astype(np.int64) - (120 << 3)
    # Subnormal range: a multiple of 2**-9, rounded half to even by rint (exact scaling).
    absx = np.abs(x)
    sub = np.rint(absx * np.float32(512.0)).astype(np.int64)
    code = np.where(absx < np.float32(2.0**-6), sub, normal)
    nan = np.isnan(x) | (code > 0x7E)
    code = np.where(nan, 0x7F, code).astype(np.uint8)
    return (code | sign).astype(np.uint8)


DEQUANT_GROUP = 64


def dequant4(raw):
    """F32 bytes -> BF16 bit patterns of 4-bit group-quantised, dequantised values."""
    w = np.frombuffer(raw, dtype="<f4").reshape(-1, DEQUANT_GROUP)
    peak = np.max(np.abs(w), axis=1, keepdims=True) / np.float32(7.0)
    scale = bf16_value(np.maximum(peak, np.float32(1e-12)))
    q = np.clip(np.rint(w / scale), -8, 7).astype(np.float32)
    return to_bf16((q * scale).astype("<f4").tobytes())


def dequant8(raw, shape):
    """F32 bytes -> BF16 bit patterns of per-row 8-bit quantised, dequantised values."""
    w = np.frombuffer(raw, dtype="<f4").reshape(shape)
    peak = np.max(np.abs(w), axis=1, keepdims=True) / np.float32(127.0)
    scale = bf16_value(np.maximum(peak, np.float32(1e-12)))
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.float32)
    return to_bf16((q * scale).astype("<f4").tobytes())


def bf16_value(x):
    """float32 array rounded to the nearest BF16 value, as float32."""
    bits = to_bf16(np.ascontiguousarray(x, dtype="<f4").tobytes()).astype("<u4") << np.uint32(16)
    return bits.view("<f4").reshape(np.shape(x))


def gguf_blocks(raw, shape, qtype):
    """F32 bytes -> GGUF blocks of `qtype` (a gguf.GGMLQuantizationType name) as U8 rows."""
    import gguf

    if qtype in K_QUANTS:
        quantize, fallback = K_QUANTS[qtype]
        if shape[1] % QK_K == 0:
            return quantize(raw, shape)
        qtype = fallback
    w = np.frombuffer(raw, dtype="<f4").reshape(shape)
    return gguf.quants.quantize(w, gguf.GGMLQuantizationType[qtype])


def mxfp4(raw, shape):
    """F32 bytes -> (blocks, scales) of MXFP4 in gpt-oss's safetensors layout."""
    blocks = gguf_blocks(raw, shape, "MXFP4").reshape(-1, 17)
    scales, packed = blocks[:, 0], blocks[:, 1:]
    # gguf packs element j with j + 16; gpt-oss packs element 2i with 2i + 1.
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=1)
    paired = codes[:, 0::2] | (codes[:, 1::2] << 4)
    groups = shape[1] // 32
    return paired.reshape(shape[0], groups, 16), scales.reshape(shape[0], groups)


QK_K = 256


def nearest(x):
    """Round half to even, as ggml's nearest_int does (it adds 1.5 * 2**23 in F32)."""
    return np.rint(x).astype(np.int32)


def make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep):
    """ggml's make_qkx2_quants (squared error) on each row of `x`: the (scale, min, levels
    0..nmax) of an asymmetric grid, searched over nstep + 1 widths of the row's range."""
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.minimum(np.min(x, axis=1), np.float32(0.0))
        high = np.max(x, axis=1)
        span = high - low
        flat = span == 0
        sum_w = np.sum(weights, axis=1)
        sum_x = np.sum(weights * x, axis=1)
        iscale = np.float32(nmax) / span
        scale = np.float32(1.0) / iscale
        levels = np.clip(nearest(iscale[:, None] * (x - low[:, None])), 0, nmax)
        best = np.sum(weights * np.square(scale[:, None] * levels + low[:, None] - x), axis=1)
        for step in range(nstep + 1):
            iscale = np.float32(rmin + rdelta * step + nmax) / span
            aux = np.clip(nearest(iscale[:, None] * (x - low[:, None])), 0, nmax).astype(np.float32)
            sum_l = np.sum(weights * aux, axis=1)
            sum_l2 = np.sum(weights * aux * aux, axis=1)
            sum_xl = np.sum(weights * aux * x, axis=1)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            # A grid must reach zero: where the fit's minimum is positive, it is clamped.
            clamp = this_min > 0
            this_min = np.where(clamp, np.float32(0.0), this_min)
            this_scale = np.where(clamp, sum_xl / sum_l2, this_scale)
            error = np.sum(weights * np.square(this_scale[:, None] * aux + this_min[:, None] - x), axis=1)
            better = (det > 0) & (error < best)
            levels = np.where(better[:, None], aux, levels)
            best = np.where(better, error, best)
            scale = np.where(better, this_scale, scale)
            low = np.where(better, this_min, low)
    levels = np.where(flat[:, None], 0, levels)
    scale = np.where(flat, np.float32(0.0), scale)
    return scale.astype(np.float32), (-low).astype(np.float32), levels.astype(np.int32)


def k_blocks(raw, shape, nmax, rmin, rdelta, nstep):
    """F32 rows -> the fields of Q4_K (nmax 15) or Q5_K (nmax 31) super-blocks, as ggml's
    quantize_row_q4_K_ref and quantize_row_q5_K_ref make them: (d and dmin as F16 [n, 2],
    the 12 bytes of 6-bit scales and mins [n, 12], levels [n, 256])."""
    x = np.frombuffer(raw, dtype="<f4").reshape(-1, QK_K // 32, 32)
    supers = x.shape[0]
    flat = x.reshape(-1, 32)
    weights = np.sqrt(np.mean(np.square(flat), axis=1, keepdims=True)) + np.abs(flat)
    scales, mins, levels = make_qkx2_quants(flat, weights, nmax, rmin, rdelta, nstep)
    scales, mins = scales.reshape(supers, 8), mins.reshape(supers, 8)
    max_scale = np.max(np.maximum(scales, 0), axis=1)
    max_min = np.max(np.maximum(mins, 0), axis=1)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, np.float32(63.0) / max_scale, np.float32(0.0))
        inv_min = np.where(max_min > 0, np.float32(63.0) / max_min, np.float32(0.0))
    ls = np.minimum(63, nearest(inv_scale[:, None] * scales)).astype(np.uint8)
    lm = np.minimum(63, nearest(inv_min[:, None] * mins)).astype(np.uint8)
    packed = np.zeros((supers, 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    packed[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    dm = np.stack([max_scale / np.float32(63.0), max_min / np.float32(63.0)], axis=1).astype("<f2")
    # The levels again, on the grid the stored (rounded) scales and mins give.
    d = dm[:, :1].astype(np.float32) * ls
    m = dm[:, 1:].astype(np.float32) * lm
    with np.errstate(divide="ignore", invalid="ignore"):
        again = np.clip(nearest((x + m[:, :, None]) / d[:, :, None]), 0, nmax)
    levels = np.where(d[:, :, None] != 0, again, levels.reshape(supers, 8, 32))
    return dm, packed, levels.reshape(supers, QK_K)


def q4_k(raw, shape):
    """F32 bytes -> Q4_K super-blocks (144 bytes: d, dmin, scales[12], qs[128]) as U8 rows."""
    dm, packed, levels = k_blocks(raw, shape, 15, -1.0, 0.1, 20)
    pairs = levels.reshape(-1, 4, 2, 32).astype(np.uint8)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([dm.view(np.uint8), packed, qs], axis=1).reshape(shape[0], -1)


def q5_k(raw, shape):
    """F32 bytes -> Q5_K super-blocks (176 bytes: d, dmin, scales[12], qh[32], qs[128])."""
    dm, packed, levels = k_blocks(raw, shape, 31, -0.5, 0.1, 15)
    pairs = levels.reshape(-1, 4, 2, 32).astype(np.uint8)
    qs = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(-1, 128)
    # Level 64c + 32h + j has its fifth bit in bit 2c + h of qh[j].
    bits = (pairs >> 4).reshape(-1, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None]
    qh = np.bitwise_or.reduce(bits, axis=1).astype(np.uint8)
    return np.concatenate([dm.view(np.uint8), packed, qh, qs], axis=1).reshape(shape[0], -1)


def make_qx_quants(x, nmax):
    """ggml's make_qx_quants with rmse_type 1 (weights x^2) on each row of `x`: the scale
    and levels (0..2 nmax - 1) of a symmetric grid, searched over 19 widths."""
    w = x * x
    pick = np.argmax(np.abs(x), axis=1)
    peak = np.take_along_axis(x, pick[:, None], axis=1)[:, 0]
    zero = np.abs(peak) < np.float32(1e-15)
    peak = np.where(zero, np.float32(1.0), peak)

    def fit(iscale):
        levels = np.clip(nearest(iscale[:, None] * x), -nmax, nmax - 1)
        return levels, np.sum(w * x * levels, axis=1), np.sum(w * levels * levels, axis=1)

    levels, sumlx, suml2 = fit(np.float32(-nmax) / peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 > 0, sumlx / suml2, np.float32(0.0))
    best = scale * sumlx
    for step in [s for s in range(-9, 10) if s != 0]:
        trial, tlx, tl2 = fit(-(np.float32(nmax) + np.float32(0.1) * step) / peak)
        better = (tl2 > 0) & (tlx * tlx > best * tl2)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(better, tlx / tl2, scale)
        levels = np.where(better[:, None], trial, levels)
        best = np.where(better, scale * tlx, best)
    scale = np.where(zero, np.float32(0.0), scale).astype(np.float32)
    return scale, np.where(zero[:, None], 0, levels + nmax)


def q6_k(raw, shape):
    """F32 bytes -> Q6_K super-blocks (210 bytes: ql[128], qh[64], scales[16] int8, d F16)
    as ggml's quantize_row_q6_K_ref makes them, as U8 rows."""
    x = np.frombuffer(raw, dtype="<f4").reshape(-1, QK_K // 16, 16)
    supers = x.shape[0]
    scales, levels = make_qx_quants(x.reshape(-1, 16), 32)
    scales, levels = scales.reshape(supers, 16), levels.reshape(supers, 16, 16)
    pick = np.argmax(np.abs(scales), axis=1)
    max_scale = np.take_along_axis(scales, pick[:, None], axis=1)[:, 0]
    empty = np.abs(max_scale) < np.float32(1e-15)
    iscale = np.float32(-128.0) / np.where(empty, np.float32(1.0), max_scale)
    d = np.where(empty, np.float32(0.0), np.float32(1.0) / iscale).astype("<f2")
    sc = np.where(empty[:, None], 0, np.minimum(127, nearest(iscale[:, None] * scales))).astype(np.int8)
    step = d.astype(np.float32)[:, None] * sc
    with np.errstate(divide="ignore", invalid="ignore"):
        again = np.clip(nearest(x / step[:, :, None]), -32, 31) + 32
    levels = np.where(step[:, :, None] != 0, again, levels)
    levels = np.where(empty[:, None, None], 0, levels).astype(np.uint8)
    # Each half of 128 levels: quarters q0..q3 of 32; ql holds q0|q2<<4 then q1|q3<<4, qh
    # the two high bits of q0..q3 in bits 0-1, 2-3, 4-5, 6-7.
    q = levels.reshape(supers, 2, 4, 32)
    ql = np.concatenate([(q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4),
                         (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)], axis=2).reshape(supers, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
          | ((q[:, :, 3] >> 4) << 6)).reshape(supers, 64)
    blocks = [ql, qh, sc.view(np.uint8), d[:, None].view(np.uint8)]
    return np.concatenate(blocks, axis=1).reshape(shape[0], -1)


# gguf-py quantizes the legacy types itself; the K-quants it only reads, so they are made
# here. A K-quant tensor whose rows are not whole super-blocks takes the type llama.cpp's
# quantize falls back to for it.
GGUF_MODES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q5_0": "Q5_0", "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K"}
K_QUANTS = {"Q4_K": (q4_k, "Q5_0"), "Q5_K": (q5_k, "Q5_1"), "Q6_K": (q6_k, "Q8_0")}
GPTQ_GROUP = 128


def pack_nibbles(q, axis):
    """uint8 values 0..15 -> int32 words of 8, value j of each 8 along `axis` in bits 4j..4j+3."""
    q = np.moveaxis(q.astype("<u4"), axis, 0)
    q = q.reshape(q.shape[0] // 8, 8, *q.shape[1:])
    words = np.zeros(q.shape[:1] + q.shape[2:], dtype="<u4")
    for j in range(8):
        words |= q[:, j] << np.uint32(4 * j)
    return np.moveaxis(words, 0, axis).view("<i4")


def gptq(raw, shape):
    """F32 [out, in] bytes -> (qweight, qzeros, scales, g_idx) as AutoGPTQ stores them."""
    out_features, in_features = shape
    w = np.frombuffer(raw, dtype="<f4").reshape(out_features, in_features).T
    groups = w.reshape(in_features // GPTQ_GROUP, GPTQ_GROUP, out_features)
    peak = np.maximum(np.max(np.abs(groups), axis=1), np.float32(1e-8))
    scales = (peak * np.float32(2.0 / 15.0)).astype("<f2")
    q = np.clip(np.rint(groups / scales[:, None, :].astype("<f4")) + 8, 0, 15).astype(np.uint8)
    zeros = np.full(scales.shape, 8 - 1, dtype=np.uint8)
    g_idx = (np.arange(in_features) // GPTQ_GROUP).astype("<i4")
    return pack_nibbles(q.reshape(in_features, out_features), 0), pack_nibbles(zeros, 1), scales, g_idx


def gptq_layer(name, dtype, shape):
    """Whether GPTQ (or AWQ, or bitsandbytes) would quantise this tensor: a linear layer's F32 weight of whole groups."""
    return (dtype == "F32" and len(shape) == 2 and name.endswith(".weight") and "embeddings" not in name
            and shape[1] % GPTQ_GROUP == 0 and shape[0] % 8 == 0)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq(raw, shape):
    """F32 [out, in] bytes -> (qweight, qzeros, scales) in AutoAWQ's GEMM layout."""
    out_features, in_features = shape
    w = np.frombuffer(raw, dtype="<f4").reshape(out_features, in_features).T
    groups = w.reshape(in_features // GPTQ_GROUP, GPTQ_GROUP, out_features)
    low, high = np.min(groups, axis=1), np.max(groups, axis=1)
    scales = (np.maximum(high - low, np.float32(1e-5)) / np.float32(15.0)).astype("<f2")
    scale = scales.astype("<f4")
    zeros = np.clip(np.rint(-low / scale), 0, 15)
    q = np.clip(np.rint(groups / scale[:, None, :]) + zeros[:, None, :], 0, 15).astype(np.uint8)
    return awq_pack(q.reshape(in_features, out_features)), awq_pack(zeros.astype(np.uint8)), scales


def awq_pack(q):
    """uint8 values 0..15 [rows, cols] -> int32 [rows, cols / 8], AWQ's order within a word."""
    q = q.astype("<u4").reshape(q.shape[0], -1, 8)
    words = np.zeros(q.shape[:2], dtype="<u4")
    for j, column in enumerate(AWQ_ORDER):
        words |= q[:, :, column] << np.uint32(4 * j)
    return words.view("<i4")


NF4_CODES = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
], dtype="<f4")
NF4_BLOCK = 64


def nf4(raw, shape):
    """F32 bytes -> (packed codes, absmax, quant map, quant state) as bitsandbytes saves NF4."""
    w = np.frombuffer(raw, dtype="<f4").reshape(-1, NF4_BLOCK)
    absmax = np.max(np.abs(w), axis=1).astype("<f4")
    x = w / np.maximum(absmax, np.float32(1e-12))[:, None]
    # The nearest code: the codes are sorted, so count the midpoints below each value.
    midpoints = (NF4_CODES[1:] + NF4_CODES[:-1]) / np.float32(2.0)
    codes = np.searchsorted(midpoints, x.ravel(), side="left").astype(np.uint8)
    packed = (codes[0::2] << 4) | codes[1::2]
    state = {"quant_type": "nf4", "blocksize": NF4_BLOCK, "dtype": "float16", "shape": list(shape)}
    blob = np.frombuffer(json.dumps(state).encode("utf-8"), dtype=np.uint8)
    return packed.reshape(-1, 1), absmax, NF4_CODES, blob


def int8_dynamic(raw, shape, per_channel):
    """F32 bytes -> (uint8 values, F32 scales, uint8 zero points) as quantize_dynamic makes
    them: per column of the transposed [in, out] weight, or for the whole tensor."""
    w = np.frombuffer(raw, dtype="<f4").reshape(shape)
    if per_channel:
        w = np.ascontiguousarray(w.T)
    axis = 0 if per_channel else None
    low = np.minimum(np.min(w, axis=axis), np.float32(0.0))
    high = np.maximum(np.max(w, axis=axis), np.float32(0.0))
    scale = np.maximum((high - low) / np.float32(255.0), np.float32(1e-12)).astype("<f4")
    zero = np.clip(np.rint(-low / scale), 0, 255).astype(np.uint8)
    q = np.clip(np.rint(w / scale) + zero, 0, 255).astype(np.uint8)
    return q, scale, zero


def quantized_layer(mode, name, raw, shape):
    """A linear layer's tensors in `mode`'s layout: [(name, dtype, shape, bytes)]."""
    layer = name[: -len(".weight")]
    if mode == "gptq":
        names, dtypes, arrays = ("qweight", "qzeros", "scales", "g_idx"), ("I32", "I32", "F16", "I32"), gptq(raw, shape)
    elif mode == "awq":
        names, dtypes, arrays = ("qweight", "qzeros", "scales"), ("I32", "I32", "F16"), awq(raw, shape)
    else:
        names = ("weight", "weight.absmax", "weight.quant_map", "weight.quant_state.bitsandbytes__nf4")
        dtypes, arrays = ("U8", "F32", "F32", "U8"), nf4(raw, shape)
    return [(f"{layer}.{n}", d, list(a.shape), a.tobytes()) for n, d, a in zip(names, dtypes, arrays)]


def int8_tensors(name, raw, shape):
    """A 2-D weight's tensors as quantize_dynamic writes them: [(name, dtype, shape, bytes)]."""
    q, scale, zero = int8_dynamic(raw, shape, per_channel="embeddings" not in name)
    return [(name + "_quantized", "U8", list(q.shape), q.tobytes()),
            (name + "_scale", "F32", list(scale.shape), scale.tobytes()),
            (name + "_zero_point", "U8", list(zero.shape), zero.tobytes())]


LAYER_MODES = ("gptq", "awq", "nf4")


def derive(mode, tensors):
    out = []
    for name, dtype, shape, raw in tensors:
        quantizable = dtype == "F32" and len(shape) == 2 and shape[1] % 32 == 0
        if mode in GGUF_MODES and quantizable:
            rows = gguf_blocks(raw, shape, GGUF_MODES[mode])
            out.append((name, "U8", list(rows.shape), rows.tobytes()))
        elif mode == "mxfp4" and quantizable:
            blocks, scales = mxfp4(raw, shape)
            out.append((name + "_blocks", "U8", list(blocks.shape), blocks.tobytes()))
            out.append((name + "_scales", "U8", list(scales.shape), scales.tobytes()))
        elif mode in LAYER_MODES and gptq_layer(name, dtype, shape):
            out.extend(quantized_layer(mode, name, raw, shape))
        elif mode in LAYER_MODES + ("positions",) and dtype == "F32":
            f16 = np.frombuffer(raw, dtype="<f4").astype("<f2")
            out.append((name, "F16", shape, f16.tobytes()))
        elif mode == "int8" and dtype == "F32" and len(shape) == 2:
            out.extend(int8_tensors(name, raw, shape))
        elif mode in GGUF_MODES or mode in ("mxfp4", "gptq", "int8") or dtype != "F32":
            out.append((name, dtype, shape, raw))
        elif mode == "bf16":
            out.append((name, "BF16", shape, to_bf16(raw).tobytes()))
        elif mode == "upcast":
            wide = to_bf16(raw).astype("<u4") << np.uint32(16)
            out.append((name, "F32", shape, wide.astype("<u4").tobytes()))
        elif mode == "fp8" and len(shape) == 2:
            w = np.frombuffer(raw, dtype="<f4")
            peak = max(float(np.max(np.abs(w))), 1e-12)
            scale = np.float32(peak / 448.0)
            out.append((name, "F8_E4M3", shape, to_e4m3fn(w / scale).tobytes()))
            out.append((name + "_scale", "F32", [], np.array(scale, dtype="<f4").tobytes()))
        elif mode == "fp8":
            out.append((name, "BF16", shape, to_bf16(raw).tobytes()))
        elif mode == "dequant4" and len(shape) == 2 and shape[1] % DEQUANT_GROUP == 0:
            out.append((name, "BF16", shape, dequant4(raw).tobytes()))
        elif mode == "dequant8" and len(shape) == 2:
            out.append((name, "BF16", shape, dequant8(raw, shape).tobytes()))
        elif mode in ("dequant4", "dequant8"):
            out.append((name, "BF16", shape, to_bf16(raw).tobytes()))
        else:
            raise SystemExit(f"derive_corpus.py: unknown mode {mode!r} (bf16, fp8, upcast, dequant4, dequant8, q8_0, q4_0, q5_0, q4_k, q5_k, q6_k, mxfp4, gptq, awq, nf4, int8, positions)")
    if mode == "positions":
        table = sinusoids(1500, 384).astype("<f2")
        out.append(("encoder.embed_positions.weight", "F16", list(table.shape), table.tobytes()))
    return out


def sinusoids(length, channels, max_timescale=10000):
    """Whisper's position table: row t is sin(t f_j) then cos(t f_j), f_j geometric."""
    step = np.log(max_timescale) / (channels // 2 - 1)
    freqs = np.exp(-step * np.arange(channels // 2, dtype=np.float32)).astype(np.float32)
    angles = np.arange(length, dtype=np.float32)[:, None] * freqs[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def main(argv):
    if len(argv) != 4:
        raise SystemExit(__doc__)
    mode, src, dst = argv[1:]
    meta, tensors = load(src)
    tensors = derive(mode, tensors)
    meta = dict(meta)
    meta["derived"] = f"{mode} of {os.path.basename(src)} (not an original release)"
    save(dst, meta, tensors)


if __name__ == "__main__":
    main(sys.argv)
