#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef COOP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#endif
// S[h][i][j] = scale * Q[i][h] . K[j][h/group], capped by softcap when it
// is not 0; -inf where query pos0 + i does not see key j (see visible).
// One 64x64 tile of (query, key) per workgroup; heads along z. COOP: its
// products on cooperative matrices (tile_coop.glsl).
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
layout(std430, binding = 2) writeonly buffer S4 { vec4 s4[]; }; // s, when keys % 4 == 0

uint h, kvh;

float tileA(uint m, uint k) { return m < pc.T && k < pc.hd ? q[(m * pc.heads + h) * pc.hd + k] : 0.0; }

void tileB8(uint n, uint k, out float v[8]) {
    for (uint i = 0; i < 8; i++) {
        v[i] = n < pc.keys && k + i < pc.hd ? kc[(n * pc.kvHeads + kvh) * pc.hd + k + i] : 0.0;
    }
}

#ifdef COOP
#define TILE_A_SCALE 1.0
#include "tile_coop.glsl"
#else
#include "tile.glsl"
#endif
#include "attend.glsl"

void main() {
    h = gl_WorkGroupID.z;
    kvh = h / (pc.heads / pc.kvHeads);
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    if (n0 <= pc.pos0 + m0 + BM - 1) { // the tile is not entirely masked
        gemmTile(m0, n0, pc.hd, acc);
    }
    // Each invocation's 4 columns of a row go out as one vec4 where they can.
    for (uint i = 0; i < 4; i++) {
        uint m = m0 + tileRow(i), n = n0 + tileCol(0);
        if (m >= pc.T) {
            continue;
        }
        vec4 v;
        for (uint j = 0; j < 4; j++) {
            v[j] = visible(pc.pos0 + m, n + j, pc.window) ? capped(acc[i][j] * pc.scale, pc.softcap) : uintBitsToFloat(0xff800000u);
        }
        uint at = (h * pc.T + m) * pc.keys + n;
        if (pc.keys % 4 == 0 && n < pc.keys) {
            s4[at / 4] = v;
            continue;
        }
        for (uint j = 0; j < 4; j++) {
            if (n + j < pc.keys) {
                s[at + j] = v[j];
            }
        }
    }
}
