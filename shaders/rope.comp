#version 450
#extension GL_GOOGLE_include_directive : require
// Rotates pairs of x [rows, heads, headDim] in place by a host-computed
// table of cos and sin per (row, pair): adjacent pairs (2i, 2i+1) or NeoX
// halves (i, i+half).
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, heads, headDim, half_;
    uint neox;
} pc;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Table { vec2 cs[]; }; // (cos, sin)

void main() {
    uint pairs = pc.rows * pc.heads * pc.half_;
    for (uint e = globalIndex(); e < pairs; e += gridStride()) {
        uint i = e % pc.half_, rh = e / pc.half_, t = rh / pc.heads;
        uint base = rh * pc.headDim;
        uint a = pc.neox != 0 ? base + i : base + 2 * i;
        uint b = pc.neox != 0 ? a + pc.half_ : a + 1;
        vec2 c = cs[t * pc.half_ + i];
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c.x - x1 * c.y;
        x[b] = x0 * c.y + x1 * c.x;
    }
}
