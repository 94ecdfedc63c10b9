// K-quant blocks are kept whole on the device, each padded to K_WORDS
// words; bytes are little-endian within a word. Values are rounded as the
// CPU backend rounds them (precise: no fused multiply-add), so both decode
// the same floats.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

uint byteAt(uint base, uint i) { return (w[base + i / 4] >> (8 * (i % 4))) & 0xffu; }

// blockOf is the first word of the block holding weight (n, k).
uint blockOf(uint n, uint k) { return (n * (W_K / 256) + k / 256) * K_WORDS; }

// kScaleMin is d*sc and dmin*m of sub-block j (of 32) of a Q4_K or Q5_K
// block: word 0 holds f16 d and dmin, bytes 4-15 the 6-bit scales and mins
// as ggml's get_scale_min_k4 packs them.
void kScaleMin(uint base, uint j, out float scale, out float offset) {
    vec2 dm = unpackHalf2x16(w[base]);
    uint sc, m;
    if (j < 4) {
        sc = byteAt(base, 4 + j) & 63u;
        m = byteAt(base, 8 + j) & 63u;
    } else {
        sc = (byteAt(base, 8 + j) & 0xfu) | ((byteAt(base, j) >> 6) << 4);
        m = (byteAt(base, 8 + j) >> 4) | ((byteAt(base, 4 + j) >> 6) << 4);
    }
    scale = dm.x * float(sc);
    offset = dm.y * float(m);
}
