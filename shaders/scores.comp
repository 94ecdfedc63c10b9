#version 450
#extension GL_GOOGLE_include_directive : require
// S[h][i][j] = scale * Q[i][h] . K[j][h/group], capped by softcap when it
// is not 0; -inf where query pos0 + i does not see key j (see visible).
// One 64x64 tile of (query, key) per workgroup; heads along z.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint T, keys, heads, kvHeads, hd, pos0;
    float scale;
    uint window;
    float softcap;
} pc;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float kc[]; };
layout(std430, binding = 2) writeonly buffer S { float s[]; };

uint h, kvh;

float tileA(uint m, uint k) { return m < pc.T && k < pc.hd ? q[(m * pc.heads + h) * pc.hd + k] : 0.0; }

void tileB8(uint n, uint k, out float v[8]) {
    for (uint i = 0; i < 8; i++) {
        v[i] = n < pc.keys && k + i < pc.hd ? kc[(n * pc.kvHeads + kvh) * pc.hd + k + i] : 0.0;
    }
}

#include "tile.glsl"
#include "attend.glsl"

void main() {
    h = gl_WorkGroupID.z;
    kvh = h / (pc.heads / pc.kvHeads);
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    if (n0 <= pc.pos0 + m0 + BM - 1) { // the tile is not entirely masked
        gemmTile(m0, n0, pc.hd, acc);
    }
    for (uint i = 0; i < 4; i++) {
        uint m = m0 + tileRow(i);
        for (uint j = 0; j < 4; j++) {
            uint n = n0 + tileCol(j);
            if (m < pc.T && n < pc.keys) {
                s[(h * pc.T + m) * pc.keys + n] = visible(pc.pos0 + m, n, pc.window) ? capped(acc[i][j] * pc.scale, pc.softcap) : uintBitsToFloat(0xff800000u);
            }
        }
    }
}
