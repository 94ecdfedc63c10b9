#version 450
#extension GL_GOOGLE_include_directive : require
// dst = (src - mean) / sqrt(var + eps) * gain + bias, one workgroup per row
// of dim elements. The variance is taken about the mean, in a second pass,
// so that a large mean does not cancel it away.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, dim;
    float eps;
    uint writeScale; // s = sqrt(var + eps) goes to scale[row]
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 2) readonly buffer Gain { float gain[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(std430, binding = 4) writeonly buffer Scale { float scale[]; };

shared float red[gl_WorkGroupSize.x];

float reduceSum(float v, uint lid) {
    red[lid] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        barrier();
    }
    float total = red[0];
    barrier();
    return total;
}

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.dim;
    float sum = 0.0;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        sum += src[base + i];
    }
    float mean = reduceSum(sum, lid) / float(pc.dim);
    float ss = 0.0;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        float v = src[base + i] - mean;
        ss += v * v;
    }
    float root = sqrt(reduceSum(ss, lid) / float(pc.dim) + pc.eps);
    if (pc.writeScale != 0 && lid == 0) {
        scale[row] = root;
    }
    float inv = 1.0 / root;
    for (uint i = lid; i < pc.dim; i += gl_WorkGroupSize.x) {
        dst[base + i] = (src[base + i] - mean) * inv * gain[i] + bias[i];
    }
}
