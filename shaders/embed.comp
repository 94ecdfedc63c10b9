#version 450
#extension GL_GOOGLE_include_directive : require
// dst[t][c] = W[ids[t]][c]: gathers and decodes embedding rows.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint T, K;
    uint scaleBase;
} pc;

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"
#include "common.glsl"

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 2) readonly buffer Ids { uint ids[]; };

void main() {
    for (uint e = globalIndex(); e < pc.T * pc.K; e += gridStride()) {
        dst[e] = weightAt(ids[e / pc.K], e % pc.K);
    }
}
