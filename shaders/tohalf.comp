#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// The cooperative GEMM's x in float16, made once for every projection that
// reads it instead of in every tile: row `row` of x (k floats, k % 8 == 0)
// becomes k/8 uvec4s of float16 at h[row * k/8] (PrecisionExact: the hi
// parts, and the remainders at h[loBase + ...]; PrecisionFast: rounded),
// and the word hw[bigBase + row] is 1 where the row has a value past
// float16's range (the GEMM then computes its tiles in float32), else 0.
// One workgroup per row.
layout(local_size_x = 256) in;
#include "common.glsl"
#include "half.glsl"

layout(push_constant) uniform Push {
    uint rows, k, loBase, bigBase, exact;
} pc;

layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
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
        uint i = row * chunks + c;
        vec4 a = x4[2 * i], b = x4[2 * i + 1];
        float v[8] = float[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
        ok = ok && fitsHalf(v);
        if (pc.exact != 0) {
            uvec4 hi, lo;
            split(v, hi, lo);
            h4[i] = hi;
            h4[pc.loBase + i] = lo;
        } else {
            h4[i] = round16(v);
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
