#version 450
#extension GL_GOOGLE_include_directive : require
// dst = silu(gate) * up over n elements; dst may be gate.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Gate { float gate[]; };
layout(std430, binding = 2) readonly buffer Up { float up[]; };

void main() {
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        float g = gate[i];
        dst[i] = g / (1.0 + exp(-g)) * up[i];
    }
}
