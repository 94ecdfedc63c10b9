// F16 weights: row-major binary16, two to a word (rows may straddle words).
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

float halfAt(uint e) { return unpackHalf2x16(w[W_BASE + (e >> 1)])[e & 1]; }

float weightAt(uint n, uint k) { return halfAt(n * W_K + k); }

void weights8(uint n, uint k, out float v[8]) {
    uint base = n * W_K + k;
    for (uint i = 0; i < 8; i++) {
        v[i] = k + i < W_K ? halfAt(base + i) : 0.0;
    }
}
