// Q6_K: 256 weights in a 210-byte block padded to 212 (53 words): 128
// bytes of low nibbles, 64 of top 2 bits, 16 int8 scales, f16 d. Weight
// 128h+32q+l has its low 4 bits in byte 64h+32(q%2)+l (the high nibble
// when q >= 2), its top 2 bits at bit 2q of byte 128+32h+l, and scale
// 192+8h+2q+l/16; weight = d*sc*(bits-32).
#define K_WORDS 53u
#include "kquants.glsl"

// kDecode decodes count weights from (n, k), all in one sub-block of 16.
void kDecode(uint n, uint k, uint count, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    uint h = j / 128, q = (j % 128) / 32, l = j % 32;
    float d = unpackHalf2x16(w[W_BASE + base + 52]).x;
    float scale = d * float(int(byteAt(base, 192 + 8 * h + 2 * q + l / 16) << 24) >> 24);
    uint lo = 64 * h + 32 * (q % 2) + l, shift = q >= 2 ? 4 : 0, hi = 128 + 32 * h + l;
    for (uint i = 0; i < count; i++) {
        uint bits = ((byteAt(base, lo + i) >> shift) & 0xfu) | (((byteAt(base, hi + i) >> (2 * q)) & 3u) << 4);
        v[i] = scale * float(int(bits) - 32);
    }
}

void kDecode8(uint n, uint k, out float v[8]) {
    uint base = blockOf(n, k), j = k % 256;
    uint h = j / 128, q = (j % 128) / 32, l = j % 32;
    float d = unpackHalf2x16(w[W_BASE + base + 52]).x;
    uint sat = 192 + 8 * h + 2 * q + l / 16;
    float scale = d * float(int(byteOf(w[W_BASE + base + sat / 4], sat) << 24) >> 24);
    uint lo = base + (64 * h + 32 * (q % 2) + l) / 4, shift = q >= 2 ? 4 : 0, hi = base + (128 + 32 * h + l) / 4;
    uint l0 = w[W_BASE + lo], l1 = w[W_BASE + lo + 1], h0 = w[W_BASE + hi], h1 = w[W_BASE + hi + 1];
    for (uint i = 0; i < 4; i++) {
        uint b0 = ((l0 >> (8 * i + shift)) & 0xfu) | (((h0 >> (8 * i + 2 * q)) & 3u) << 4);
        uint b1 = ((l1 >> (8 * i + shift)) & 0xfu) | (((h1 >> (8 * i + 2 * q)) & 3u) << 4);
        v[i] = scale * float(int(b0) - 32);
        v[i + 4] = scale * float(int(b1) - 32);
    }
}

#include "kwrap.glsl"
