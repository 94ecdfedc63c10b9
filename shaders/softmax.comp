#version 450
#extension GL_GOOGLE_include_directive : require
// dst = softmax(src) per row of n; -inf entries get exactly 0.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, n;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

shared float red[gl_WorkGroupSize.x];

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.n;
    float m = uintBitsToFloat(0xff800000u);
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        m = max(m, src[base + i]);
    }
    red[lid] = m;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        barrier();
    }
    m = red[0];
    barrier();
    float sum = 0.0;
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        sum += exp(src[base + i] - m);
    }
    red[lid] = sum;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        barrier();
    }
    float inv = 1.0 / red[0];
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        dst[base + i] = exp(src[base + i] - m) * inv;
    }
}
