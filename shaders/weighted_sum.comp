#version 450
#extension GL_GOOGLE_include_directive : require
// dst[r] = sum over j < k of w[r*k+j] * src[r*k+j], rows of cols floats:
// each token's experts' outputs, mixed.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, k, cols;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };

void main() {
    for (uint e = globalIndex(); e < pc.rows * pc.cols; e += gridStride()) {
        uint r = e / pc.cols, c = e % pc.cols;
        float acc = 0.0;
        for (uint j = 0; j < pc.k; j++) {
            acc += w[r * pc.k + j] * src[(r * pc.k + j) * pc.cols + c];
        }
        dst[e] = acc;
    }
}
