#version 450
#extension GL_GOOGLE_include_directive : require
// Changes a strided view of x in place: rows of cols elements, row r at
// off + r*stride; the source's row r is at srcOff + r*srcStride.
layout(local_size_x = 256) in;
#include "common.glsl"

#define OP_FILL 0
#define OP_SCALE 1
#define OP_SET 2
#define OP_ADD 3

layout(push_constant) uniform Push {
    uint op;
    uint off, rows, cols, stride;
    float scalar;
    uint srcOff, srcStride;
} pc;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };

void main() {
    for (uint e = globalIndex(); e < pc.rows * pc.cols; e += gridStride()) {
        uint r = e / pc.cols, c = e % pc.cols;
        uint i = pc.off + r * pc.stride + c;
        switch (pc.op) {
        case OP_FILL:
            x[i] = pc.scalar;
            break;
        case OP_SCALE:
            x[i] *= pc.scalar;
            break;
        case OP_SET:
            x[i] = src[pc.srcOff + r * pc.srcStride + c];
            break;
        case OP_ADD:
            x[i] += pc.scalar * src[pc.srcOff + r * pc.srcStride + c];
            break;
        }
    }
}
