#version 450
#extension GL_GOOGLE_include_directive : require
// Causal attention without materialising scores: each workgroup takes BQ
// queries of one head and streams the keys in blocks of BKV through shared
// memory with an online softmax. Eight invocations share a query row, each
// owning the dims lane, lane+8, ... of its output.
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint HD = 128; // head dim, at most 256

#define BQ 16
#define BKV 16
#define LANES 8
#define MAX_PER_LANE 32

layout(push_constant) uniform Push {
    uint T, keys, heads, kvHeads, hd, pos0;
    float scale;
} pc;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float kc[]; };
layout(std430, binding = 2) readonly buffer V { float vc[]; };
layout(std430, binding = 3) writeonly buffer Z { float z[]; };

shared float Qs[BQ * HD];
shared float Ks[BKV * HD];
shared float Vs[BKV * HD];
shared float S[BQ][BKV];

void main() {
    const float negInf = uintBitsToFloat(0xff800000u);
    uint h = gl_WorkGroupID.y, kvh = h / (pc.heads / pc.kvHeads);
    uint q0 = gl_WorkGroupID.x * BQ;
    uint tid = gl_LocalInvocationIndex, row = tid / LANES, lane = tid % LANES;
    for (uint e = tid; e < BQ * HD; e += gl_WorkGroupSize.x) {
        uint r = e / HD, d = e % HD, i = q0 + r;
        Qs[e] = i < pc.T ? q[(i * pc.heads + h) * HD + d] : 0.0;
    }
    float o[MAX_PER_LANE];
    for (uint t = 0; t < MAX_PER_LANE; t++) {
        o[t] = 0.0;
    }
    float m = negInf, l = 0.0;
    uint kEnd = min(pc.keys, pc.pos0 + q0 + BQ); // keys any row of the block sees
    for (uint j0 = 0; j0 < kEnd; j0 += BKV) {
        barrier(); // the previous block is consumed (and Qs written)
        for (uint e = tid; e < BKV * HD; e += gl_WorkGroupSize.x) {
            uint r = e / HD, d = e % HD, j = j0 + r;
            bool ok = j < pc.keys;
            uint at = (j * pc.kvHeads + kvh) * HD + d;
            Ks[e] = ok ? kc[at] : 0.0;
            Vs[e] = ok ? vc[at] : 0.0;
        }
        barrier();
        for (uint e = tid; e < BQ * BKV; e += gl_WorkGroupSize.x) {
            uint r = e / BKV, c = e % BKV, i = q0 + r, j = j0 + c;
            float sc = negInf;
            if (i < pc.T && j < pc.keys && j <= pc.pos0 + i) {
                float acc = 0.0;
                for (uint d = 0; d < HD; d++) {
                    acc += Qs[r * HD + d] * Ks[c * HD + d];
                }
                sc = acc * pc.scale;
            }
            S[r][c] = sc;
        }
        barrier();
        float mx = m;
        for (uint c = 0; c < BKV; c++) {
            mx = max(mx, S[row][c]);
        }
        if (mx != negInf) {
            float alpha = exp(m - mx);
            l *= alpha;
            for (uint t = 0; t < MAX_PER_LANE; t++) {
                o[t] *= alpha;
            }
            for (uint c = 0; c < BKV; c++) {
                float pj = exp(S[row][c] - mx);
                l += pj;
                for (uint t = 0; t < MAX_PER_LANE; t++) {
                    uint d = lane + LANES * t;
                    if (d < HD) {
                        o[t] += pj * Vs[c * HD + d];
                    }
                }
            }
            m = mx;
        }
    }
    uint i = q0 + row;
    if (i < pc.T) {
        for (uint t = 0; t < MAX_PER_LANE; t++) {
            uint d = lane + LANES * t;
            if (d < HD) {
                z[(i * pc.heads + h) * HD + d] = o[t] / l;
            }
        }
    }
}
