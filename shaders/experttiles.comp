#version 450
#extension GL_GOOGLE_include_directive : require
// A MatMulExperts' groups table (groups.glsl) from a routing on the device
// (backend.ExpertRouting): each expert's rows in tiles of pc.bm, three words
// a tile (first row, the end of the expert's rows, the expert) from word
// pc.at, in expert order; the rest of pc.tiles entries empty (first row =
// end: their workgroups return at once). Lane e finds its first tile by
// summing the tiles of the experts below it: experts are a few hundred.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint experts, bm, tiles, at;
} pc;

layout(std430, binding = 0) buffer Groups { uint groups[]; };
layout(std430, binding = 1) readonly buffer Routing { uint routing[]; };

shared uint total;

void main() {
    const uint tid = gl_LocalInvocationIndex;
    if (tid == 0) {
        total = 0;
    }
    barrier();
    for (uint e = tid; e < pc.experts; e += 256) {
        uint first = 0;
        for (uint j = 0; j < e; j++) {
            first += (routing[j] + pc.bm - 1) / pc.bm;
        }
        const uint n = routing[e], row = routing[pc.experts + e], end = row + n;
        for (uint t = 0; t * pc.bm < n && first + t < pc.tiles; t++) {
            const uint at = pc.at + 3 * (first + t);
            groups[at] = row + t * pc.bm;
            groups[at + 1] = end;
            groups[at + 2] = e;
        }
        if (e == pc.experts - 1) {
            total = first + (n + pc.bm - 1) / pc.bm;
        }
    }
    barrier();
    for (uint t = total + tid; t < pc.tiles; t += 256) {
        groups[pc.at + 3 * t] = 0;
        groups[pc.at + 3 * t + 1] = 0;
        groups[pc.at + 3 * t + 2] = 0;
    }
}
