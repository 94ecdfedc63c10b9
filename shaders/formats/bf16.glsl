// BF16 weights: row-major bfloat16 (the top half of a float), two to a word.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

float bfloatAt(uint e) { return uintBitsToFloat(((w[W_BASE + (e >> 1)] >> (16 * (e & 1))) & 0xffffu) << 16); }

float weightAt(uint n, uint k) { return bfloatAt(n * W_K + k); }

void weights8(uint n, uint k, out float v[8]) {
    uint base = n * W_K + k;
    for (uint i = 0; i < 8; i++) {
        v[i] = k + i < W_K ? bfloatAt(base + i) : 0.0;
    }
}
