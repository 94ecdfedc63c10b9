#version 450
#extension GL_GOOGLE_include_directive : require
// A mixture's slots lined up by expert on the device (backend.ExpertRouting's
// routing): workgroup e counts the slots of experts below e (where its rows
// start) and its own, then writes its slots in order, a chunk at a time,
// each lane's run of the chunk at its place by a prefix sum. An id that is
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
    // A chunk of 256 x RUN slots at a time, a lane's run of RUN in a row:
    // its matches counted, an inclusive prefix sum of the counts in mine,
    // then its matches written from its place.
    const uint RUN = 16;
    for (uint c = 0; c < pc.slots; c += 256 * RUN) {
        const uint first = c + tid * RUN, last = min(first + RUN, pc.slots);
        uint n = 0;
        for (uint s = first; s < last; s++) {
            n += expertOf(s) == e ? 1 : 0;
        }
        mine[tid] = n;
        barrier();
        for (uint h = 1; h < 256; h <<= 1) {
            uint add = tid >= h ? mine[tid - h] : 0;
            barrier();
            mine[tid] += add;
            barrier();
        }
        uint at = base + mine[tid] - n;
        for (uint s = first; s < last && n > 0; s++) {
            if (expertOf(s) == e) {
                routing[2 * pc.experts + at++] = s;
            }
        }
        base += mine[255];
        barrier();
    }
}
