// Q5_K: 256 weights in a 176-byte block (44 words): f16 d and dmin, 12
// bytes of scales and mins, 32 bytes of fifth bits, 128 bytes of nibbles
// packed as Q4_K's. The fifth bit of weight 64c+l is bit 2c of byte 16+l,
// of weight 64c+32+l bit 2c+1; weight = d*sc*q - dmin*m.
#define K_WORDS 44u
#include "kquants.glsl"

// kDecode decodes count weights from (n, k), all in one sub-block of 32.
void kDecode(uint n, uint k, uint count, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    float scale, offset;
    kScaleMin(base, j / 32, scale, offset);
    uint l = j % 32, half_ = (j / 32) % 2, at = 48 + 32 * (j / 64) + l, bit = 2 * (j / 64) + half_;
    for (uint i = 0; i < count; i++) {
        uint q = ((byteAt(base, at + i) >> (4 * half_)) & 0xfu) | (((byteAt(base, 16 + l + i) >> bit) & 1u) << 4);
        precise float x = scale * float(q) - offset;
        v[i] = x;
    }
}

void kDecode8(uint n, uint k, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    float scale, offset;
    kScaleMin(base, j / 32, scale, offset);
    uint l = j % 32, at = base + (48 + 32 * (j / 64) + l) / 4, fifth = base + (16 + l) / 4;
    uint bit = 2 * (j / 64) + (j / 32) % 2;
    uint q[8];
    nibbles8(w[W_BASE + at], w[W_BASE + at + 1], 4 * ((j / 32) % 2), q);
    uint f0 = w[W_BASE + fifth], f1 = w[W_BASE + fifth + 1];
    for (uint i = 0; i < 4; i++) {
        q[i] |= ((f0 >> (8 * i + bit)) & 1u) << 4;
        q[i + 4] |= ((f1 >> (8 * i + bit)) & 1u) << 4;
    }
    for (uint i = 0; i < 8; i++) {
        precise float x = scale * float(q[i]) - offset;
        v[i] = x;
    }
}

#include "kwrap.glsl"
