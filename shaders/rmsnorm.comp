#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// dst = src / s * gain with s = sqrt(mean(src^2) + eps) for each row of dim
// elements; s goes to scale[row] when writeScale is set. One workgroup per
// row, or (USE_SUBGROUP) one subgroup per row and ROWS rows per workgroup,
// with no barrier: a Q/K norm's rows are one head (64-256 elements), which
// left most of a workgroup idle between its barriers.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, dim;
    float eps;
    uint writeScale;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 0) writeonly buffer Dst4 { vec4 dst4[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Src4 { vec4 src4[]; };
layout(std430, binding = 2) readonly buffer Gain { float gain[]; };
layout(std430, binding = 2) readonly buffer Gain4 { vec4 gain4[]; };
layout(std430, binding = 3) writeonly buffer Scale { float scale[]; };

// sumSquares is this invocation's share of row's sum of squares: elements
// first, first + step, ... (in vec4s where rows are whole vec4s).
float sumSquares(uint row, uint first, uint step) {
    float ss = 0.0;
    if (pc.dim % 4 == 0) {
        uint base = row * pc.dim / 4;
        for (uint i = first; i < pc.dim / 4; i += step) {
            vec4 v = src4[base + i];
            ss += dot(v, v);
        }
        return ss;
    }
    uint base = row * pc.dim;
    for (uint i = first; i < pc.dim; i += step) {
        float v = src[base + i];
        ss += v * v;
    }
    return ss;
}

// apply writes this invocation's share of row, scaled by inv and the gain.
void apply(uint row, uint first, uint step, float inv) {
    if (pc.dim % 4 == 0) {
        uint base = row * pc.dim / 4;
        for (uint i = first; i < pc.dim / 4; i += step) {
            dst4[base + i] = src4[base + i] * inv * gain4[i];
        }
        return;
    }
    uint base = row * pc.dim;
    for (uint i = first; i < pc.dim; i += step) {
        dst[base + i] = src[base + i] * inv * gain[i];
    }
}

#ifdef USE_SUBGROUP
layout(constant_id = 1) const uint ROWS = 1; // rows per workgroup

void main() {
    // The lanes counted, not gl_SubgroupSize: unless the pipeline requires
    // full subgroups, Vulkan does not promise that many lanes run.
    uint lane = subgroupExclusiveAdd(1u), lanes = subgroupAdd(1u);
    for (uint r = gl_SubgroupID; r < ROWS; r += gl_NumSubgroups) {
        uint row = groupIndex() * ROWS + r;
        if (row >= pc.rows) {
            break; // and so are the rows after it
        }
        float root = sqrt(subgroupAdd(sumSquares(row, lane, lanes)) / float(pc.dim) + pc.eps);
        if (pc.writeScale != 0 && subgroupElect()) {
            scale[row] = root;
        }
        apply(row, lane, lanes, 1.0 / root);
    }
}
#else
shared float red[gl_WorkGroupSize.x];

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    red[lid] = sumSquares(row, lid, gl_WorkGroupSize.x);
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
    apply(row, lid, gl_WorkGroupSize.x, 1.0 / root);
}
#endif
