#version 450
#extension GL_GOOGLE_include_directive : require
// Adds up the parts of a cooperative GEMM split along K (matmul_coop.comp
// or matmul_coop2.comp with kChunk): y[i] = sum over z of
// part[base + z stride + i], plus bias[i % cols] with hasBias. Parts are
// added in order of k, so the result does not depend on how the device
// schedules them.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n, cols, parts, base, hasBias;
    uint stride; // elements from one part to the next: n, or more where a part is padded
} pc;

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };

void main() {
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        float sum = 0.0;
        for (uint z = 0; z < pc.parts; z++) {
            sum += part[pc.base + z * pc.stride + i];
        }
        y[i] = sum + (pc.hasBias != 0 ? bias[i % pc.cols] : 0.0);
    }
}
