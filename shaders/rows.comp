#version 450
#extension GL_GOOGLE_include_directive : require
// Moves rows of cols floats by an index list: GATHER copies src row idx[i]
// to dst row i, otherwise src row i goes to dst row idx[i]. With ROUTED the
// list is a routing's slots (backend.ExpertRouting, sortexperts.comp), as
// many as it routed, and a gathered row is its slot's token, slot / k.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n, cols;
    uint k, experts; // with ROUTED
} pc;
#ifdef ROUTED
layout(std430, binding = 2) readonly buffer Routing { uint routing[]; };
#else
layout(std430, binding = 2) readonly buffer Idx { int idx[]; };
#endif

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

void main() {
    uint n = pc.n;
#ifdef ROUTED
    n = min(n, routing[pc.experts - 1] + routing[2 * pc.experts - 1]); // the last expert's first row and count
#endif
    for (uint e = globalIndex(); e < n * pc.cols; e += gridStride()) {
        uint i = e / pc.cols, c = e % pc.cols;
#ifdef ROUTED
        uint r = routing[2 * pc.experts + i];
#ifdef GATHER
        r /= pc.k;
#endif
#else
        uint r = uint(idx[i]);
#endif
#ifdef GATHER
        dst[i * pc.cols + c] = src[r * pc.cols + c];
#else
        dst[r * pc.cols + c] = src[i * pc.cols + c];
#endif
    }
}
