#version 450
#extension GL_GOOGLE_include_directive : require
// Writes to dst the rows x [rows, heads, headDim] rotated by a host-computed
// table of cos and sin per (row, pair): adjacent pairs (2i, 2i+1) or NeoX
// halves (i, i+half) of the first 2*half dims; the rest pass unchanged. dst
// may be bound to x's buffer: each element is read and written by one
// invocation.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, heads, headDim, half_;
    uint neox;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Table { vec2 cs[]; }; // (cos, sin)

void main() {
    // Per head: half_ pairs, then headDim - 2*half_ dims that pass.
    uint per = pc.headDim - pc.half_;
    uint items = pc.rows * pc.heads * per;
    for (uint e = globalIndex(); e < items; e += gridStride()) {
        uint j = e % per, rh = e / per, t = rh / pc.heads;
        uint base = rh * pc.headDim;
        if (j >= pc.half_) {
            uint p = base + pc.half_ + j;
            dst[p] = x[p];
            continue;
        }
        uint a = pc.neox != 0 ? base + j : base + 2 * j;
        uint b = pc.neox != 0 ? a + pc.half_ : a + 1;
        vec2 c = cs[t * pc.half_ + j];
        float x0 = x[a], x1 = x[b];
        dst[a] = x0 * c.x - x1 * c.y;
        dst[b] = x0 * c.y + x1 * c.x;
    }
}
