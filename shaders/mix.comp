#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef COOP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#endif
// Z[i][h][d] = sum_{j <= pos0+i} P[h][i][j] V[j][h/group][d].
// One 64x64 tile of (query, dim) per workgroup; heads along z. COOP: its
// products on cooperative matrices (tile_coop.glsl), P taken times 1024.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint T, keys, heads, kvHeads, hd, pos0;
} pc;

layout(std430, binding = 0) readonly buffer P { float p[]; };
layout(std430, binding = 1) readonly buffer V { float vc[]; };
layout(std430, binding = 2) writeonly buffer Z { float z[]; };
layout(std430, binding = 2) writeonly buffer Z4 { vec4 z4[]; }; // z, when hd % 4 == 0

uint h, kvh;

float tileA(uint m, uint k) {
    return m < pc.T && k < pc.keys && k <= pc.pos0 + m ? p[(h * pc.T + m) * pc.keys + k] : 0.0;
}

void tileB8(uint n, uint k, out float v[8]) {
    for (uint i = 0; i < 8; i++) {
        v[i] = n < pc.hd && k + i < pc.keys ? vc[((k + i) * pc.kvHeads + kvh) * pc.hd + n] : 0.0;
    }
}

#ifdef COOP
#define TILE_A_SCALE 1024.0
#include "tile_coop.glsl"
#else
#include "tile.glsl"
#endif

void main() {
    h = gl_WorkGroupID.z;
    kvh = h / (pc.heads / pc.kvHeads);
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    // Keys past the tile's last query are masked for every row of it.
    gemmTile(m0, n0, min(pc.keys, pc.pos0 + m0 + BM), acc);
    // Each invocation's 4 dims of a row go out as one vec4 where they can.
    for (uint i = 0; i < 4; i++) {
        uint m = m0 + tileRow(i), n = n0 + tileCol(0);
        uint at = (m * pc.heads + h) * pc.hd + n;
        if (m >= pc.T) {
            continue;
        }
        if (pc.hd % 4 == 0 && n < pc.hd) {
            z4[at / 4] = acc[i];
            continue;
        }
        for (uint j = 0; j < 4; j++) {
            if (n + j < pc.hd) {
                z[at + j] = acc[i][j];
            }
        }
    }
}
