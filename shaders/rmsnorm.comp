#version 450
#extension GL_GOOGLE_include_directive : require
// dst = src / s * gain with s = sqrt(mean(src^2) + eps), one workgroup per
// row of dim elements; s goes to scale[row] when writeScale is set.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, dim;
    float eps;
    uint writeScale;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 2) readonly buffer Gain { float gain[]; };
layout(std430, binding = 3) writeonly buffer Scale { float scale[]; };

shared float red[gl_WorkGroupSize.x];

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.dim;
    float ss = 0.0;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        float v = src[base + i];
        ss += v * v;
    }
    red[lid] = ss;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        barrier();
    }
    float root = sqrt(red[0] / float(pc.dim) + pc.eps);
    if (pc.writeScale != 0 && lid == 0) {
        scale[row] = root;
    }
    float inv = 1.0 / root;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        dst[base + i] = src[base + i] * inv * gain[i];
    }
}
