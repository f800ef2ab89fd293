"""Dequantization oracle for the CPU backend's block formats.

Random blocks of every GGUF weight type deepinfer reads, with finite f16
scales, dequantized by the `gguf` PyPI package (gguf-py, pinned 0.19.0 with
numpy) -- an implementation independent of ours. Writes
tests/fixtures/cpu/dequant.bin, read by tests/unit/test_cpu_quant.c:

  repeated records: u32 ggml_type, u32 n_elements, u32 n_bytes,
                    n_bytes of blocks, n_elements little-endian f32

Usage: python tests/oracle/make_dequant_fixtures.py [OUT]
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# ggml type -> (elements per block, bytes per block, offsets of f16 scale fields)
LAYOUT = {
    T.F16: (1, 2, []),
    T.BF16: (1, 2, []),
    T.Q4_0: (32, 18, [0]),
    T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]),
    T.Q5_1: (32, 24, [0, 2]),
    T.Q8_0: (32, 34, [0]),
    T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]),
    T.Q6_K: (256, 210, [208]),
    T.Q2_K: (256, 84, [80, 82]),
    T.Q3_K: (256, 110, [108]),
    T.IQ4_NL: (32, 18, [0]),
    T.IQ4_XS: (256, 136, [0]),
}


def random_blocks(rng, qtype, n_blocks):
    be, bb, scale_offs = LAYOUT[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    if qtype == T.F16:
        vals = rng.standard_normal(n_blocks).astype(np.float16)
        return vals.view(np.uint8).reshape(n_blocks, 2)
    if qtype == T.BF16:
        vals = rng.standard_normal(n_blocks).astype(np.float32)
        return (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    for off in scale_offs:
        s = (rng.uniform(-0.05, 0.05, n_blocks)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    return raw


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/cpu/dequant.bin"
    rng = np.random.default_rng(20261130)
    with open(out, "wb") as f:
        for qtype, (be, bb, _) in LAYOUT.items():
            n_elems = 1024
            n_blocks = n_elems // be
            raw = random_blocks(rng, qtype, n_blocks)
            deq = quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
            assert deq.size == n_elems
            f.write(struct.pack("<III", int(qtype), n_elems, raw.size))
            f.write(raw.tobytes())
            f.write(deq.astype("<f4").tobytes())


if __name__ == "__main__":
    main()
