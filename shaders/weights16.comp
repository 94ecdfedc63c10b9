#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// A weight matrix decoded to float16 once for the cooperative GEMM, which
// then stages plain halves instead of decoding each weight in every tile
// of rows of x: row n of W (k weights, k % 8 == 0) becomes k/8 uvec4s at
// h[base + n * k/8], rounded as the GEMM would round them at fast precision
// or, with split (exact precision), as float16 hi parts and the remainders
// from h[loBase] on; the word hw[bigBase + n] is 1 where the row has a
// weight past float16's range (the GEMM then computes its tiles in float32).
// One workgroup per row.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint rows, k;
    uint scaleBase; // the format's first word of block scales
    uint base, loBase, bigBase, split;
} pc;

#define W_BINDING 0
#define W_K pc.k
#define W_SCALES pc.scaleBase
#include "common.glsl"
#include "formats/select.glsl"
#include "half.glsl"

layout(std430, binding = 1) writeonly buffer H4 { uvec4 h4[]; };
layout(std430, binding = 1) writeonly buffer HW { uint hw[]; };

shared uint big;

void main() {
    uint row = groupIndex(), lid = gl_LocalInvocationID.x;
    if (row >= pc.rows) {
        return;
    }
    if (lid == 0) {
        big = 0;
    }
    barrier();
    uint chunks = pc.k / 8;
    bool ok = true;
    for (uint c = lid; c < chunks; c += gl_WorkGroupSize.x) {
        float v[8];
        weights8(row, 8 * c, v);
        ok = ok && fitsHalf(v);
        uint i = row * chunks + c;
        if (pc.split != 0) {
            uvec4 hi, lo;
            split(v, hi, lo);
            h4[pc.base + i] = hi;
            h4[pc.loBase + i] = lo;
        } else {
            h4[pc.base + i] = round16(v);
        }
    }
    if (!ok) {
        atomicOr(big, 1u);
    }
    barrier();
    if (lid == 0) {
        hw[pc.bigBase + row] = big;
    }
}
