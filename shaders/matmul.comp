#version 450
#extension GL_GOOGLE_include_directive : require
// Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]) for a weight in any format.
// With GROUPED, a mixture's experts (MatMulExperts): each row of
// workgroups takes rows [m0, mEnd) of X and Y and its expert's weight, which
// starts at word wBase of the binding the experts share, from the groups
// table (groups.glsl).
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase; // first word of the block scales
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

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

// FAST (PrecisionFast) rounds both inputs to float16's 11 significant bits,
// as the cooperative-matrix kernel does, so that the precision means the
// same on any device; values outside float16's range stay float32. The
// rounding is done on the bits (to nearest, ties to even): NVIDIA's
// compiler folds a round trip through packHalf2x16 to the identity.
layout(constant_id = 0) const uint FAST = 0;

float input16(float v) {
    if (FAST == 0 || !(abs(v) <= 65504.0)) {
        return v;
    }
    uint u = floatBitsToUint(v);
    u += 0x0fffu + ((u >> 13) & 1u);
    return uintBitsToFloat(u & 0xffffe000u);
}

float tileA(uint m, uint k) { return m < mEnd && k < pc.K ? input16(x[m * pc.K + k]) : 0.0; }

void tileB8(uint n, uint k, out float v[8]) {
    if (n < pc.N && k < pc.K) {
        weights8(n, k, v);
        for (uint i = 0; i < 8; i++) {
            v[i] = input16(v[i]);
        }
        return;
    }
    for (uint i = 0; i < 8; i++) {
        v[i] = 0.0;
    }
}

#include "tile.glsl"

void main() {
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    mEnd = pc.M;
    if (GROUPED != 0) {
        m0 = groupRows(gl_WorkGroupID.y, pc.basesBase);
        if (m0 >= mEnd) {
            return; // an empty entry of the groups table (experttiles.comp)
        }
    }
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    gemmTile(m0, n0, pc.K, acc);
    for (uint i = 0; i < 4; i++) {
        uint m = m0 + tileRow(i);
        for (uint j = 0; j < 4; j++) {
            uint n = n0 + tileCol(j);
            if (m < mEnd && n < pc.N) {
                y[m * pc.N + n] = acc[i][j] + (pc.hasBias != 0 ? bias[n] : 0.0);
            }
        }
    }
}
