#version 450
#extension GL_GOOGLE_include_directive : require
// dst[i] = a[i] + b[i] for i < n; dst may be bound to a's buffer.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer A { float a[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };

void main() {
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        dst[i] = a[i] + b[i];
    }
}
