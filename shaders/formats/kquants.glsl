// K-quant blocks are kept whole on the device, each padded to K_WORDS
// words; bytes are little-endian within a word. Values are rounded as the
// CPU backend rounds them (precise: no fused multiply-add), so both decode
// the same floats.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

uint byteAt(uint base, uint i) { return (w[W_BASE + base + i / 4] >> (8 * (i % 4))) & 0xffu; }

// byteOf is byte i % 4 of word v.
uint byteOf(uint v, uint i) { return (v >> (8 * (i % 4))) & 0xffu; }

// nibbles8 is byte i of lo then hi (two words) shifted right by shift, low 4
// bits: the 8 weights' quants of a Q4_K or Q5_K run of 8.
void nibbles8(uint lo, uint hi, uint shift, out uint q[8]) {
    for (uint i = 0; i < 4; i++) {
        q[i] = (lo >> (8 * i + shift)) & 0xfu;
        q[i + 4] = (hi >> (8 * i + shift)) & 0xfu;
    }
}

// blockOf is the first word of the block holding weight (n, k).
uint blockOf(uint n, uint k) { return (n * (W_K / 256) + k / 256) * K_WORDS; }

// kScaleMin is d*sc and dmin*m of sub-block j (of 32) of a Q4_K or Q5_K
// block: word 0 holds f16 d and dmin, bytes 4-15 the 6-bit scales and mins
// as ggml's get_scale_min_k4 packs them.
void kScaleMin(uint base, uint j, out float scale, out float offset) {
    // Words 1-3 hold the 12 bytes, read once each.
    uint s0 = w[W_BASE + base + 1], s1 = w[W_BASE + base + 2], s2 = w[W_BASE + base + 3];
    vec2 dm = unpackHalf2x16(w[W_BASE + base]);
    uint sc, m;
    if (j < 4) {
        sc = byteOf(s0, j) & 63u;
        m = byteOf(s1, j) & 63u;
    } else {
        sc = (byteOf(s2, j) & 0xfu) | ((byteOf(s0, j) >> 6) << 4);
        m = (byteOf(s2, j) >> 4) | ((byteOf(s1, j) >> 6) << 4);
    }
    scale = dm.x * float(sc);
    offset = dm.y * float(m);
}
