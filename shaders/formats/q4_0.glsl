// Q4_0: 16 bytes (4 words) per block; byte j holds weight j in its low
// nibble and weight j+16 in its high nibble; weight = (q - 8) * d.
#include "scales.glsl"

float weightAt(uint n, uint k) {
    uint b = n * (W_K / 32) + k / 32, j = k % 32;
    uint byte_ = j % 16, shift = j < 16 ? 0 : 4;
    uint q = (w[W_BASE + b * 4 + byte_ / 4] >> (8 * (byte_ % 4) + shift)) & 0xfu;
    return float(int(q) - 8) * scaleOf(b);
}

void weights8(uint n, uint k, out float v[8]) {
    uint b = n * (W_K / 32) + k / 32, j = k % 32;
    uint byte0 = j % 16, shift = j < 16 ? 0 : 4;
    float d = scaleOf(b);
    uint w0 = w[W_BASE + b * 4 + byte0 / 4], w1 = w[W_BASE + b * 4 + byte0 / 4 + 1];
    for (uint i = 0; i < 4; i++) {
        v[i] = float(int((w0 >> (8 * i + shift)) & 0xfu) - 8) * d;
        v[i + 4] = float(int((w1 >> (8 * i + shift)) & 0xfu) - 8) * d;
    }
}
