#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]) for at most MV_ROWS rows of X,
// as in a decoding step, where matmul's 64-row tiles would be mostly idle:
// one workgroup per output feature, its invocations splitting K into runs
// of 8 and summing with subgroup adds (USE_SUBGROUP) or through shared memory.
layout(local_size_x = 128) in;
#define MV_ROWS 8

layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase;
    uint hasBias;
} pc;

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

shared float red[MV_ROWS][gl_WorkGroupSize.x];

void main() {
    uint n = groupIndex(), lid = gl_LocalInvocationID.x;
    if (n >= pc.N) {
        return;
    }
    float acc[MV_ROWS];
    for (uint m = 0; m < MV_ROWS; m++) {
        acc[m] = 0.0;
    }
    for (uint k = 8 * lid; k < pc.K; k += 8 * gl_WorkGroupSize.x) {
        float w[8];
        weights8(n, k, w);
        for (uint m = 0; m < MV_ROWS; m++) {
            if (m < pc.M) {
                for (uint i = 0; i < 8; i++) {
                    if (k + i < pc.K) {
                        acc[m] += w[i] * x[m * pc.K + k + i];
                    }
                }
            }
        }
    }
#ifdef USE_SUBGROUP
    for (uint m = 0; m < MV_ROWS; m++) {
        acc[m] = subgroupAdd(acc[m]);
    }
    if (subgroupElect()) {
        for (uint m = 0; m < MV_ROWS; m++) {
            red[m][gl_SubgroupID] = acc[m];
        }
    }
    barrier();
    uint parts = gl_NumSubgroups;
#else
    for (uint m = 0; m < MV_ROWS; m++) {
        red[m][lid] = acc[m];
    }
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            for (uint m = 0; m < MV_ROWS; m++) {
                red[m][lid] += red[m][lid + s];
            }
        }
        barrier();
    }
    uint parts = 1;
#endif
    if (lid < pc.M) {
        float sum = 0.0;
        for (uint p = 0; p < parts; p++) {
            sum += red[lid][p];
        }
        y[lid * pc.N + n] = sum + (pc.hasBias != 0 ? bias[n] : 0.0);
    }
}
