// TQ2_0_g128: 128 2-bit codes (8 words) per block; codes 0, 1, 2, 3 mean
// -d, 0, +d, 0 (a quantizer never writes 3).
#include "scales.glsl"

float tq2(uint code) { return code == 0 ? -1.0 : (code == 2 ? 1.0 : 0.0); }

float weightAt(uint n, uint k) {
    uint b = n * (W_K / 128) + k / 128, j = k % 128;
    return tq2((w[W_BASE + b * 8 + j / 16] >> (2 * (j % 16))) & 3u) * scaleOf(b);
}

void weights8(uint n, uint k, out float v[8]) {
    uint b = n * (W_K / 128) + k / 128, j = k % 128;
    float d = scaleOf(b);
    uint codes = w[W_BASE + b * 8 + j / 16] >> (2 * (j % 16));
    for (uint i = 0; i < 8; i++) {
        v[i] = tq2((codes >> (2 * i)) & 3u) * d;
    }
}
