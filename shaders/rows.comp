#version 450
#extension GL_GOOGLE_include_directive : require
// Moves rows of cols floats by an index list: GATHER copies src row idx[i]
// to dst row i, otherwise src row i goes to dst row idx[i].
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n, cols;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 2) readonly buffer Idx { int idx[]; };

void main() {
    for (uint e = globalIndex(); e < pc.n * pc.cols; e += gridStride()) {
        uint i = e / pc.cols, c = e % pc.cols, r = uint(idx[i]);
#ifdef GATHER
        dst[i * pc.cols + c] = src[r * pc.cols + c];
#else
        dst[r * pc.cols + c] = src[i * pc.cols + c];
#endif
    }
}
