#version 450
#extension GL_GOOGLE_include_directive : require
// A mixture's slots lined up by expert on the device (backend.ExpertRouting's
// routing): workgroup e counts the slots of experts below e (where its rows
// start) and its own, then writes its slots in order, a chunk of 256 at a
// time, each at its place among the chunk's by a prefix sum. An id that is
// not an expert below pc.experts (Route writes -1 for an empty slot) counts
// as empty. Routing: counts [experts], first rows [experts], slots.
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint slots, experts;
} pc;

layout(std430, binding = 0) writeonly buffer Routing { uint routing[]; };
layout(std430, binding = 1) readonly buffer Ids { float ids[]; };

shared uint below[256], mine[256];

uint expertOf(uint s) {
    float v = ids[s];
    int e = int(v);
    return float(e) == v && e >= 0 && uint(e) < pc.experts ? uint(e) : 0xFFFFFFFFu;
}

void main() {
    const uint e = gl_WorkGroupID.x, tid = gl_LocalInvocationIndex;
    uint b = 0, m = 0;
    for (uint s = tid; s < pc.slots; s += 256) {
        uint x = expertOf(s);
        b += x < e ? 1 : 0;
        m += x == e ? 1 : 0;
    }
    below[tid] = b;
    mine[tid] = m;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (tid < h) {
            below[tid] += below[tid + h];
            mine[tid] += mine[tid + h];
        }
        barrier();
    }
    uint base = below[0];
    if (tid == 0) {
        routing[e] = mine[0];
        routing[pc.experts + e] = base;
    }
    barrier();
    // Each chunk's matches: an inclusive prefix sum in mine.
    for (uint c = 0; c < pc.slots; c += 256) {
        const uint s = c + tid;
        const bool match = s < pc.slots && expertOf(s) == e;
        mine[tid] = match ? 1 : 0;
        barrier();
        for (uint h = 1; h < 256; h <<= 1) {
            uint add = tid >= h ? mine[tid - h] : 0;
            barrier();
            mine[tid] += add;
            barrier();
        }
        if (match) {
            routing[2 * pc.experts + base + mine[tid] - 1] = s;
        }
        base += mine[255];
        barrier();
    }
}
