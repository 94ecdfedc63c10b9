#version 450
#extension GL_GOOGLE_include_directive : require
// dst[i] += src[i] for i < n.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n;
} pc;

layout(std430, binding = 0) buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

void main() {
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        dst[i] += src[i];
    }
}
