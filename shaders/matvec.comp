#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]) for at most MV_ROWS rows of X,
// as in a decoding step, where matmul's 64-row tiles would be mostly idle.
// Invocations split K into runs of 8. USE_SUBGROUP: a subgroup per output
// feature, ROWS features per workgroup, summed with subgroup adds and no
// barrier (a workgroup per feature spent more on starting and reducing
// than on a 2,048-wide row: bonsai-1.7b's LM head took 0.53 ms on the
// H200); without, a workgroup per feature, summed through shared memory.
// GROUPED: a mixture's experts, as in matmul.comp: workgroups along z each
// take up to MV_ROWS of one expert's rows and its weight (groups.glsl).
layout(local_size_x = 128) in;
#define MV_ROWS 8

layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase;
    uint hasBias;
    uint basesBase; // with GROUPED: where this weight's experts' words start in the table
} pc;

layout(constant_id = 1) const uint GROUPED = 0;
#define GROUPS_BINDING 4
#include "groups.glsl"

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

float acc[MV_ROWS];
uint m0; // the first row of x the workgroup takes

// rowsFrom sets m0 and mEnd: the workgroup's rows of x.
void rowsFrom() {
    m0 = 0;
    mEnd = pc.M;
    if (GROUPED != 0) {
        m0 = groupRows(gl_WorkGroupID.z, pc.basesBase);
    }
}

// accumulate adds feature n's products over k = first, first + step, ...
// (in runs of 8) to acc.
void accumulate(uint n, uint first, uint step) {
    [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
        acc[m] = 0.0;
    }
    for (uint k = first; k < pc.K; k += step) {
        float w[8];
        weights8(n, k, w);
        [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
            if (m0 + m < mEnd) {
                [[unroll]] for (uint i = 0; i < 8; i++) {
                    if (k + i < pc.K) {
                        acc[m] += w[i] * x[(m0 + m) * pc.K + k + i];
                    }
                }
            }
        }
    }
}

#ifdef USE_SUBGROUP
layout(constant_id = 0) const uint ROWS = 1; // features per workgroup

void main() {
    // The lanes counted, not gl_SubgroupSize: unless the pipeline requires
    // full subgroups, Vulkan does not promise that many lanes run.
    uint lane = subgroupExclusiveAdd(1u), lanes = subgroupAdd(1u);
    rowsFrom();
    if (m0 >= mEnd) {
        return; // an empty entry of the groups table (experttiles.comp)
    }
    for (uint r = gl_SubgroupID; r < ROWS; r += gl_NumSubgroups) {
        uint n = groupIndex() * ROWS + r;
        if (n >= pc.N) {
            break; // and so are the features after it
        }
        accumulate(n, 8 * lane, 8 * lanes);
        [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
            acc[m] = subgroupAdd(acc[m]);
        }
        if (subgroupElect()) {
            [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
                if (m0 + m < mEnd) {
                    y[(m0 + m) * pc.N + n] = acc[m] + (pc.hasBias != 0 ? bias[n] : 0.0);
                }
            }
        }
    }
}
#else
shared float red[MV_ROWS][gl_WorkGroupSize.x];

void main() {
    uint n = groupIndex(), lid = gl_LocalInvocationID.x;
    if (n >= pc.N) {
        return;
    }
    rowsFrom();
    if (m0 >= mEnd) {
        return; // an empty entry of the groups table (experttiles.comp)
    }
    accumulate(n, 8 * lid, 8 * gl_WorkGroupSize.x);
    [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
        red[m][lid] = acc[m];
    }
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            [[unroll]] for (uint m = 0; m < MV_ROWS; m++) {
                red[m][lid] += red[m][lid + s];
            }
        }
        barrier();
    }
    if (lid < MV_ROWS && m0 + lid < mEnd) {
        y[(m0 + lid) * pc.N + n] = red[lid][0] + (pc.hasBias != 0 ? bias[n] : 0.0);
    }
}
#endif
