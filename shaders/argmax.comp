#version 450
#extension GL_GOOGLE_include_directive : require
// dst[row] = index of the largest of n elements (the first on ties), as a
// float; -1 where the row holds a NaN, which has no largest.
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, n;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

shared float bestV[gl_WorkGroupSize.x];
shared uint bestI[gl_WorkGroupSize.x];
shared uint nanSeen;

// better orders candidates: larger value, then smaller index.
bool better(float v, uint i, float w, uint j) { return v > w || (v == w && i < j); }

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    if (lid == 0) {
        nanSeen = 0;
    }
    barrier();
    float v = uintBitsToFloat(0xff800000u);
    uint idx = 0xffffffffu;
    bool nan = false;
    for (uint i = lid; i < pc.n; i += gl_WorkGroupSize.x) {
        float x = src[row * pc.n + i];
        nan = nan || isnan(x);
        if (better(x, i, v, idx)) {
            v = x;
            idx = i;
        }
    }
    if (nan) {
        atomicOr(nanSeen, 1u);
    }
    bestV[lid] = v;
    bestI[lid] = idx;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s && better(bestV[lid + s], bestI[lid + s], bestV[lid], bestI[lid])) {
            bestV[lid] = bestV[lid + s];
            bestI[lid] = bestI[lid + s];
        }
        barrier();
    }
    if (lid == 0) {
        dst[row] = nanSeen != 0 ? -1.0 : float(bestI[0] == 0xffffffffu ? 0 : bestI[0]);
    }
}
