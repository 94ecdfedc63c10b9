#version 450
#extension GL_GOOGLE_include_directive : require
// dst[row] = how many of a row's n elements are larger than its element col
// (0 when that one is the largest), as a float.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, n, col;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

shared uint count[gl_WorkGroupSize.x];

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    float v = src[row * pc.n + pc.col];
    uint c = 0;
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        if (src[row * pc.n + i] > v) {
            c++;
        }
    }
    count[lid] = c;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            count[lid] += count[lid + s];
        }
        barrier();
    }
    if (lid == 0) {
        dst[row] = float(count[0]);
    }
}
