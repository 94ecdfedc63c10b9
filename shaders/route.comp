#version 450
#extension GL_GOOGLE_include_directive : require
// A mixture's routing: for each row of router logits [rows, experts], the
// softmax's top k experts (the lower index on a tie), their probabilities
// renormalised to sum to 1; ids (as float) and weights [rows, k], best
// first; -1 and 0 for a slot only experts of probability 0 could fill,
// every slot when every logit is -Inf (each expert ablated). A row with a
// NaN logit gets experts 0..k-1 at NaN weights. One invocation per row:
// experts are at most a few hundred.
layout(local_size_x = 64) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint rows, experts, k;
} pc;

layout(std430, binding = 0) writeonly buffer Ids { float ids[]; };
layout(std430, binding = 1) writeonly buffer Weights { float weights[]; };
layout(std430, binding = 2) readonly buffer Logits { float logits[]; };

void main() {
    for (uint r = globalIndex(); r < pc.rows; r += gridStride()) {
        uint base = r * pc.experts;
        float negInf = uintBitsToFloat(0xff800000u);
        float m = negInf;
        bool ablated = true; // every logit -Inf; a NaN is not
        for (uint e = 0; e < pc.experts; e++) {
            m = max(m, logits[base + e]);
            ablated = ablated && logits[base + e] == negInf;
        }
        if (ablated) {
            for (uint j = 0; j < pc.k; j++) {
                ids[r * pc.k + j] = -1.0;
                weights[r * pc.k + j] = 0.0;
            }
            continue;
        }
        float sum = 0.0;
        for (uint e = 0; e < pc.experts; e++) {
            sum += exp(logits[base + e] - m);
        }
        if (!(sum > 0.0)) {
            for (uint j = 0; j < pc.k; j++) {
                ids[r * pc.k + j] = float(j);
                weights[r * pc.k + j] = uintBitsToFloat(0x7fc00000u);
            }
            continue;
        }
        // Select k times the best not yet taken: taken experts are those
        // already written, found again by value and index order.
        float kept = 0.0, lastP = 2.0;
        uint lastE = 0;
        for (uint j = 0; j < pc.k; j++) {
            int best = -1;
            float bestP = 0.0; // only a positive probability fills a slot
            for (uint e = 0; e < pc.experts; e++) {
                float p = exp(logits[base + e] - m) / sum;
                // Order: by p descending, then index ascending.
                bool after = j == 0 || p < lastP || (p == lastP && e > lastE);
                if (after && p > bestP) {
                    best = int(e);
                    bestP = p;
                }
            }
            ids[r * pc.k + j] = float(best);
            weights[r * pc.k + j] = bestP;
            if (best < 0) {
                continue; // and so is every later slot
            }
            kept += bestP;
            lastP = bestP;
            lastE = uint(best);
        }
        for (uint j = 0; j < pc.k; j++) {
            weights[r * pc.k + j] /= kept;
        }
    }
}
