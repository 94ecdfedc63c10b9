// Q1_0_g128: 128 sign bits (4 words) per block; bit set means +d, clear -d.
#include "scales.glsl"

float weightAt(uint n, uint k) {
    uint b = n * (W_K / 128) + k / 128, j = k % 128;
    float d = scaleOf(b);
    return ((w[W_BASE + b * 4 + j / 32] >> (j % 32)) & 1u) != 0 ? d : -d;
}

void weights8(uint n, uint k, out float v[8]) {
    uint b = n * (W_K / 128) + k / 128, j = k % 128;
    float d = scaleOf(b);
    uint bits = w[W_BASE + b * 4 + j / 32] >> (j % 32);
    for (uint i = 0; i < 8; i++) {
        v[i] = ((bits >> i) & 1u) != 0 ? d : -d;
    }
}
