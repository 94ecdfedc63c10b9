// F32 weights: row-major float bits.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

float weightAt(uint n, uint k) { return uintBitsToFloat(w[W_BASE + n * W_K + k]); }

void weights8(uint n, uint k, out float v[8]) {
    uint base = n * W_K + k;
    for (uint i = 0; i < 8; i++) {
        v[i] = k + i < W_K ? uintBitsToFloat(w[W_BASE + base + i]) : 0.0;
    }
}
