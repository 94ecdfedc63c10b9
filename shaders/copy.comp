#version 450
#extension GL_GOOGLE_include_directive : require
// dst[dstOff + i] = src[srcOff + i] for i < n, on the device's cores: the
// copy command moved a capture-all trace's points at a tenth of what the
// H200's memory does. VEC4 (n and both offsets multiples of 4) moves 16
// bytes per invocation.
layout(local_size_x = 256) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint n, dstOff, srcOff, vec4s;
} pc;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(std430, binding = 0) writeonly buffer Dst4 { uvec4 dst4[]; };
layout(std430, binding = 1) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Src4 { uvec4 src4[]; };

void main() {
    if (pc.vec4s != 0) {
        uint d = pc.dstOff / 4, s = pc.srcOff / 4;
        for (uint i = globalIndex(); i < pc.n / 4; i += gridStride()) {
            dst4[d + i] = src4[s + i];
        }
        return;
    }
    for (uint i = globalIndex(); i < pc.n; i += gridStride()) {
        dst[pc.dstOff + i] = src[pc.srcOff + i];
    }
}
