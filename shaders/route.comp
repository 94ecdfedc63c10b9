#version 450
#extension GL_GOOGLE_include_directive : require
// A mixture's routing: for each row of router logits [rows, experts], the
// softmax's top k experts (the lower index on a tie), their probabilities
// renormalised to sum to 1; ids (as float) and weights [rows, k], best
// first; -1 and 0 for a slot only experts of probability 0 could fill,
// every slot when every logit is -Inf (each expert ablated). A row with a
// NaN logit gets experts 0..k-1 at NaN weights. A workgroup a row, each
// lane taking every 64th expert; the maximum, the sum and each slot's
// best found by reductions in shared memory (one invocation a row looping
// over the experts k times took 3.9 ms of a qwen3moe-30b-a3b prefill at
// every length: few rows for the device's cores).
layout(local_size_x = 64) in;
#include "common.glsl"
const uint MAX_K = 256; // routeMaxK in backend/vulkan

layout(push_constant) uniform Push {
    uint rows, experts, k;
} pc;

layout(std430, binding = 0) writeonly buffer Ids { float ids[]; };
layout(std430, binding = 1) writeonly buffer Weights { float weights[]; };
layout(std430, binding = 2) readonly buffer Logits { float logits[]; };

shared float redP[64];
shared uint redE[64];
shared float chosen[MAX_K];

// reduceBest leaves in redP[0], redE[0] the lanes' best (p, e): the larger
// p, then the lower e.
void reduceBest(uint lane, float p, uint e) {
    redP[lane] = p;
    redE[lane] = e;
    barrier();
    for (uint h = 32; h > 0; h >>= 1) {
        if (lane < h) {
            float q = redP[lane + h];
            uint f = redE[lane + h];
            if (q > redP[lane] || q == redP[lane] && f < redE[lane]) {
                redP[lane] = q;
                redE[lane] = f;
            }
        }
        barrier();
    }
}

// reduceSum leaves in redP[0] the sum of the lanes' v.
void reduceSum(uint lane, float v) {
    redP[lane] = v;
    barrier();
    for (uint h = 32; h > 0; h >>= 1) {
        if (lane < h) {
            redP[lane] += redP[lane + h];
        }
        barrier();
    }
}

void main() {
    const uint lane = gl_LocalInvocationIndex, none = 0xFFFFFFFFu;
    const float negInf = uintBitsToFloat(0xff800000u);
    for (uint r = groupIndex(); r < pc.rows; r += gl_NumWorkGroups.x * gl_NumWorkGroups.y) {
        const uint base = r * pc.experts, slot0 = r * pc.k;
        float m = negInf, live = 0.0; // live: a logit that is not -Inf (a NaN is not)
        for (uint e = lane; e < pc.experts; e += 64) {
            m = max(m, logits[base + e]);
            live += logits[base + e] == negInf ? 0.0 : 1.0;
        }
        reduceSum(lane, live);
        const bool ablated = redP[0] == 0.0;
        barrier();
        reduceBest(lane, m, 0);
        m = redP[0];
        barrier();
        if (ablated) {
            for (uint j = lane; j < pc.k; j += 64) {
                ids[slot0 + j] = -1.0;
                weights[slot0 + j] = 0.0;
            }
            continue;
        }
        float part = 0.0;
        for (uint e = lane; e < pc.experts; e += 64) {
            part += exp(logits[base + e] - m);
        }
        reduceSum(lane, part);
        const float sum = redP[0];
        barrier();
        if (!(sum > 0.0)) {
            for (uint j = lane; j < pc.k; j += 64) {
                ids[slot0 + j] = float(j);
                weights[slot0 + j] = uintBitsToFloat(0x7fc00000u);
            }
            continue;
        }
        // Select k times the best after the last one taken (by p
        // descending, then index ascending); only a positive probability
        // fills a slot.
        float kept = 0.0, lastP = 2.0;
        uint lastE = 0;
        for (uint j = 0; j < pc.k; j++) {
            float bestP = 0.0;
            uint best = none;
            for (uint e = lane; e < pc.experts; e += 64) {
                float p = exp(logits[base + e] - m) / sum;
                bool after = j == 0 || p < lastP || (p == lastP && e > lastE);
                if (after && p > bestP) {
                    best = e;
                    bestP = p;
                }
            }
            reduceBest(lane, bestP, best);
            bestP = redP[0];
            best = redE[0];
            barrier();
            if (lane == 0) {
                ids[slot0 + j] = best == none ? -1.0 : float(best);
                chosen[j] = bestP;
            }
            if (best != none) {
                kept += bestP;
                lastP = bestP;
                lastE = best;
            }
        }
        barrier();
        for (uint j = lane; j < pc.k; j += 64) {
            weights[slot0 + j] = chosen[j] / kept;
        }
        barrier();
    }
}
