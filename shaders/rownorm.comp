#version 450
#extension GL_GOOGLE_include_directive : require
// dst[row] = the L2 norm of src[off + row*n .. off + (row+1)*n).
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, n, off;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

shared float sum[gl_WorkGroupSize.x];

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = pc.off + row * pc.n;
    float s = 0.0;
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        float x = src[base + i];
        s += x * x;
    }
    sum[lid] = s;
    barrier();
    for (uint k = gl_WorkGroupSize.x / 2; k > 0; k /= 2) {
        if (lid < k) {
            sum[lid] += sum[lid + k];
        }
        barrier();
    }
    if (lid == 0) {
        dst[row] = sqrt(sum[0]);
    }
}
