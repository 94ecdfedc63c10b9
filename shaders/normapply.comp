#version 450
#extension GL_GOOGLE_include_directive : require
// A norm by given scales, one workgroup per row of dim elements:
// dst = (src - mean) / scale[row] * gain + bias (CENTER: LayerNorm), or
// src / scale[row] * gain (RMSNorm), for a hook_scale that was edited.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, dim;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 2) readonly buffer Scale { float scale[]; };
layout(std430, binding = 3) readonly buffer Gain { float gain[]; };
#ifdef CENTER
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };

shared float red[gl_WorkGroupSize.x];
#endif

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.dim;
    float mean = 0.0;
#ifdef CENTER
    float sum = 0.0;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        sum += src[base + i];
    }
    red[lid] = sum;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        barrier();
    }
    mean = red[0] / float(pc.dim);
#endif
    float inv = 1.0 / scale[row];
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        float y = (src[base + i] - mean) * inv * gain[i];
#ifdef CENTER
        y += bias[i];
#endif
        dst[base + i] = y;
    }
}
