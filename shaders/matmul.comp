#version 450
#extension GL_GOOGLE_include_directive : require
// Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]) for a weight in any format.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase; // first word of the block scales
    uint hasBias;
} pc;

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

float tileA(uint m, uint k) { return m < pc.M && k < pc.K ? x[m * pc.K + k] : 0.0; }

void tileB8(uint n, uint k, out float v[8]) {
    if (n < pc.N && k < pc.K) {
        weights8(n, k, v);
        return;
    }
    for (uint i = 0; i < 8; i++) {
        v[i] = 0.0;
    }
}

#include "tile.glsl"

void main() {
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    gemmTile(m0, n0, pc.K, acc);
    for (uint i = 0; i < 4; i++) {
        uint m = m0 + tileRow(i);
        for (uint j = 0; j < 4; j++) {
            uint n = n0 + tileCol(j);
            if (m < pc.M && n < pc.N) {
                y[m * pc.N + n] = acc[i][j] + (pc.hasBias != 0 ? bias[n] : 0.0);
            }
        }
    }
}
