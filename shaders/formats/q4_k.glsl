// Q4_K: 256 weights in a 144-byte block (36 words): f16 d and dmin, 12
// bytes of scales and mins, 128 bytes of nibbles. The 32 bytes from
// 16+32c hold weights 64c.. in their low nibbles and 64c+32.. in their
// high ones; weight = d*sc*q - dmin*m of its sub-block of 32.
#define K_WORDS 36u
#include "kquants.glsl"

// kDecode decodes count weights from (n, k), all in one sub-block of 32.
void kDecode(uint n, uint k, uint count, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    float scale, offset;
    kScaleMin(base, j / 32, scale, offset);
    uint at = 16 + 32 * (j / 64) + j % 32, shift = 4 * ((j / 32) % 2);
    for (uint i = 0; i < count; i++) {
        precise float x = scale * float((byteAt(base, at + i) >> shift) & 0xfu) - offset;
        v[i] = x;
    }
}

void kDecode8(uint n, uint k, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    float scale, offset;
    kScaleMin(base, j / 32, scale, offset);
    uint at = base + (16 + 32 * (j / 64) + j % 32) / 4;
    uint q[8];
    nibbles8(w[at], w[at + 1], 4 * ((j / 32) % 2), q);
    for (uint i = 0; i < 8; i++) {
        precise float x = scale * float(q[i]) - offset;
        v[i] = x;
    }
}

#include "kwrap.glsl"
