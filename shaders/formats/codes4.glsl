// 4-bit codes, repacked on upload from a format whose weights are
// scale*code - offset over runs of 32 (quant.Format.Codes; Q4_K): each
// run's 32 codes in 4 words, code i in nibble i % 8 of word i / 8; then,
// from word W_SCALES, each run's float32 scale and offset. Two loads
// decode 8 weights, where Q4_K's blocks take six and the scale unpacking.
// precise: no fused multiply-add, so the CPU backend's floats come out.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

void runScale(uint r, out float scale, out float offset) {
    scale = uintBitsToFloat(w[W_BASE + W_SCALES + 2 * r]);
    offset = uintBitsToFloat(w[W_BASE + W_SCALES + 2 * r + 1]);
}

float weightAt(uint n, uint k) {
    uint r = n * (W_K / 32) + k / 32, j = k % 32;
    float scale, offset;
    runScale(r, scale, offset);
    precise float x = scale * float((w[W_BASE + 4 * r + j / 8] >> (4 * (j % 8))) & 0xfu) - offset;
    return x;
}

void weights8(uint n, uint k, out float v[8]) {
    uint r = n * (W_K / 32) + k / 32;
    float scale, offset;
    runScale(r, scale, offset);
    uint codes = w[W_BASE + (4 * r + (k % 32) / 8)];
    for (uint i = 0; i < 8; i++) {
        precise float x = scale * float((codes >> (4 * i)) & 0xfu) - offset;
        v[i] = x;
    }
}
