#version 450
#extension GL_GOOGLE_include_directive : require
// x = cap * tanh(x / cap) in place over n elements.
layout(local_size_x = 256) in;
#include "common.glsl"
#include "attend.glsl"

layout(push_constant) uniform Push {
    uint n;
    float cap;
} pc;

layout(std430, binding = 0) buffer X { float x[]; };

void main() {
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        x[i] = capped(x[i], pc.cap);
    }
}
