// Q8_0: 32 int8 quants (8 words) per block; weight = q * d.
#include "scales.glsl"

float weightAt(uint n, uint k) {
    uint b = n * (W_K / 32) + k / 32, j = k % 32;
    int q = int(w[W_BASE + b * 8 + j / 4] << (24 - 8 * (j % 4))) >> 24;
    return float(q) * scaleOf(b);
}

void weights8(uint n, uint k, out float v[8]) {
    uint b = n * (W_K / 32) + k / 32, j = k % 32;
    float d = scaleOf(b);
    uint w0 = w[W_BASE + b * 8 + j / 4], w1 = w[W_BASE + b * 8 + j / 4 + 1];
    for (uint i = 0; i < 4; i++) {
        v[i] = float(int(w0 << (24 - 8 * i)) >> 24) * d;
        v[i + 4] = float(int(w1 << (24 - 8 * i)) >> 24) * d;
    }
}
