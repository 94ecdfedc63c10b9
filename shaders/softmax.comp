#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// dst = softmax(src) per row of n; -inf entries get exactly 0. A row of up
// to HELD x the workgroup's size (every row of a capture up to 4,096 keys
// with 256 invocations) is read once and held in registers, not three
// times: a captured attention's scores are gigabytes.
//
// Causal (t > 0): the rows are [heads, t] queries of a prefill from pos0
// whose scores are -inf outside each query's keys (before a sliding window
// of window keys, past the query): only the keys in between are read, and
// the zeros around them are written unless held says dst has them from a
// prefill of the same layout (half a causal pattern's bytes).
layout(local_size_x_id = 0) in; // a power of two
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, n;
    uint t, pos0, window, held;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

shared float red[gl_WorkGroupSize.x];

const uint HELD = 16;

// combine is reduce's operation: the max of a and b, or their sum.
float combine(float a, float b, bool isMax) { return isMax ? max(a, b) : a + b; }

// reduce gives every invocation the workgroup's max (isMax) or sum of v:
// through subgroup operations and one exchange (USE_SUBGROUP: two
// barriers), or a tree in shared memory (one barrier per halving).
float reduce(float v, bool isMax) {
    uint lid = gl_LocalInvocationID.x;
#ifdef USE_SUBGROUP
    v = isMax ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) {
        red[gl_SubgroupID] = v;
    }
    barrier();
    v = red[0];
    for (uint i = 1; i < gl_NumSubgroups; i++) {
        v = combine(v, red[i], isMax);
    }
#else
    red[lid] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s /= 2) {
        if (lid < s) {
            red[lid] = combine(red[lid], red[lid + s], isMax);
        }
        barrier();
    }
    v = red[0];
#endif
    barrier();
    return v;
}

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (row >= pc.rows) {
        return;
    }
    uint lo = 0, hi = pc.n; // the keys read
    if (pc.t > 0) {
        hi = min(pc.n, pc.pos0 + row % pc.t + 1);
        lo = pc.window > 0 && hi > pc.window ? hi - pc.window : 0;
    }
    uint base = row * pc.n + lo, len = hi - lo, rest = lid + HELD * wg;
    const float negInf = uintBitsToFloat(0xff800000u);
    float m = negInf, held[HELD];
    [[unroll]] for (uint k = 0; k < HELD; k++) {
        uint i = lid + k * wg;
        held[k] = i < len ? src[base + i] : negInf;
        m = max(m, held[k]);
    }
    for (uint i = rest; i < len; i += wg) {
        m = max(m, src[base + i]);
    }
    m = reduce(m, true);
    float sum = 0.0;
    [[unroll]] for (uint k = 0; k < HELD; k++) {
        held[k] = exp(held[k] - m); // 0 past the row: exp(-inf)
        sum += held[k];
    }
    for (uint i = rest; i < len; i += wg) {
        sum += exp(src[base + i] - m);
    }
    float inv = 1.0 / reduce(sum, false);
    [[unroll]] for (uint k = 0; k < HELD; k++) {
        uint i = lid + k * wg;
        if (i < len) {
            dst[base + i] = held[k] * inv;
        }
    }
    for (uint i = rest; i < len; i += wg) {
        dst[base + i] = exp(src[base + i] - m) * inv;
    }
    if (pc.held == 0 && len < pc.n) {
        for (uint i = lid; i < lo; i += wg) {
            dst[row * pc.n + i] = 0.0;
        }
        for (uint i = hi + lid; i < pc.n; i += wg) {
            dst[row * pc.n + i] = 0.0;
        }
    }
}
