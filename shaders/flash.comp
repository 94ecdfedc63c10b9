#version 450
#extension GL_GOOGLE_include_directive : require
// Causal attention without materialising scores. A workgroup takes R rows:
// R/hpw queries times hpw heads of one GQA group, so each K/V tile it reads
// serves every head of the group. Per block of BKV keys (up to the last key
// its queries see) it computes the R x BKV scores as a register-tiled
// product over DC-dim slices of Q and K staged in shared memory, updates an
// online softmax, and adds P V into register tiles of TM rows x 4 dims (per
// 64 dims of the head), V staged in key slices. The host's shared-memory
// check (FlashAttention in backend/vulkan/kernels.go) mirrors these sizes.
#define R 64   // rows (query, head) per workgroup
#define BKV 64 // keys per block; equal to R, so Q and K slices share a layout
#define DC 16  // dims per Q/K slice
#define TM 8   // rows of each invocation's score and output tiles
#define WG (R * BKV / (4 * TM)) // invocations: each scores TM rows x 4 keys
#define SQ (WG / R)             // invocations sharing a row's softmax
#define NLD (R * DC / 4 / WG)   // vec4s of a Q (and of a K) slice each loads
#define RS (R + 4) // stride of transposed tiles: vec4-aligned, banks spread
#define RS4 (RS / 4)
#define STAGE4 (2 * DC * RS4) // vec4s staging a Q and a K slice, or a V slice
layout(local_size_x = WG) in;
layout(constant_id = 0) const uint HD = 128; // head dim, at most 256
// Sliding windows and score caps (Gemma) are compiled in only where used:
// their tests in the inner loops cost plain attention a fifth of its time.
layout(constant_id = 1) const bool WINDOWED = false;
layout(constant_id = 2) const bool CAPPED = false;

const uint HDP = (HD + 3) / 4 * 4; // head dim padded to whole vec4s
const uint HDP4 = HDP / 4;
const uint NV = (HDP + 63) / 64;   // vec4 output columns per invocation
// Keys per V slice, so that KC * HDP fits in the staging area.
const uint KC = HDP > 128 ? 8 : (HDP > 64 ? 16 : 32);

layout(push_constant) uniform Push {
    uint T, keys, heads, kvHeads, hd, pos0;
    float scale;
    uint window;
    float softcap;
    uint hpw; // heads per workgroup: divides heads/kvHeads, at most R
} pc;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 0) readonly buffer Q4 { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer K { float kc[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 kc4[]; };
layout(std430, binding = 2) readonly buffer V { float vc[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 vc4[]; };
layout(std430, binding = 3) writeonly buffer Z { float z[]; };
layout(std430, binding = 3) writeonly buffer Z4 { vec4 z4[]; };

shared vec4 stage[STAGE4];   // Qt[DC][RS] then Kt[DC][RS], or V[KC][HDP]
shared vec4 St[BKV * RS4];   // scores, then probabilities, [key][row]
shared float red[SQ * R];    // partial row maxima, then row sums
shared vec4 alphas[R / 4];   // each row's rescale for this block

// LOAD4 defines a reader of 4 dims from d of the row at base, zero past HD.
#define LOAD4(name, arr, arr4) \
    vec4 name(uint base, uint d) { \
        if (HD % 4 == 0) { \
            return d < HD ? arr4[(base + d) / 4] : vec4(0.0); \
        } \
        vec4 v; \
        for (uint e = 0; e < 4; e++) { \
            v[e] = d + e < HD ? arr[base + d + e] : 0.0; \
        } \
        return v; \
    }
#include "attend.glsl"

LOAD4(loadQ, q, q4)
LOAD4(loadK, kc, kc4)
LOAD4(loadV, vc, vc4)

void main() {
    const float negInf = uintBitsToFloat(0xff800000u);
    uint tid = gl_LocalInvocationIndex;
    uint tr = tid / 16, tc = tid % 16; // tiles: rows TM*tr.., keys or dims 4tc..
    uint sr = tid % R, sq = tid / R;   // softmax: row sr, keys sq*BKV/SQ..
    uint hpw = pc.hpw, bq = R / hpw;
    // The last query blocks see the most keys: start them first.
    uint q0 = (gl_NumWorkGroups.x - 1 - gl_WorkGroupID.x) * bq;
    uint h0 = gl_WorkGroupID.y * hpw, kvh = h0 / (pc.heads / pc.kvHeads);
    uint qEnd = min(q0 + bq, pc.T);
    uint kEnd = min(pc.keys, pc.pos0 + qEnd); // keys any row sees
    uint kvStride = pc.kvHeads * HD;

    // Slice loads: vec4 u of an invocation is row lr[u], dims ld.. of it;
    // rows past the queries (padding) load zeros.
    uint lr[NLD], ld = 4 * (tid % (DC / 4)), qBase[NLD];
    bool qValid[NLD];
    for (uint u = 0; u < NLD; u++) {
        lr[u] = (tid + u * WG) / (DC / 4);
        uint qi = lr[u] / hpw;
        qValid[u] = qi < bq && q0 + qi < pc.T;
        qBase[u] = ((q0 + qi) * pc.heads + h0 + lr[u] % hpw) * HD;
    }

    // Tiles wholly of padding rows (short prefills, decoding) skip the math.
    uint firstQuery = TM * tr / hpw;
    bool live = firstQuery < bq && q0 + firstQuery < pc.T;

    vec4 o[TM * NV];
    for (uint t = 0; t < TM * NV; t++) {
        o[t] = vec4(0.0);
    }
    float m = negInf, l = 0.0; // row sr's running max and this invocation's part of its sum

    // With a window, blocks wholly before the first query's window are
    // skipped: no row of the workgroup sees them.
    uint jStart = 0;
    if (WINDOWED && pc.pos0 + q0 + 1 > pc.window) {
        jStart = (pc.pos0 + q0 + 1 - pc.window) / BKV * BKV;
    }
    for (uint j0 = jStart; j0 < kEnd; j0 += BKV) {
        // S = Q K^T over d-slices; the next slice's loads fly during the FMAs.
        vec4 qn[NLD], kn[NLD];
        for (uint u = 0; u < NLD; u++) {
            qn[u] = qValid[u] ? loadQ(qBase[u], ld) : vec4(0.0);
            kn[u] = j0 + lr[u] < pc.keys ? loadK((j0 + lr[u]) * kvStride + kvh * HD, ld) : vec4(0.0);
        }
        vec4 s[TM];
        for (uint i = 0; i < TM; i++) {
            s[i] = vec4(0.0);
        }
        for (uint d0 = 0; d0 < HDP; d0 += DC) {
            barrier(); // the staging area is consumed
            for (uint u = 0; u < NLD; u++) {
                for (uint e = 0; e < 4; e++) {
                    uint at = (ld + e) * RS + lr[u];
                    stage[at / 4][at % 4] = qn[u][e];
                    at += DC * RS;
                    stage[at / 4][at % 4] = kn[u][e];
                }
            }
            barrier();
            if (d0 + DC < HDP) {
                for (uint u = 0; u < NLD; u++) {
                    qn[u] = qValid[u] ? loadQ(qBase[u], d0 + DC + ld) : vec4(0.0);
                    kn[u] = j0 + lr[u] < pc.keys ? loadK((j0 + lr[u]) * kvStride + kvh * HD, d0 + DC + ld) : vec4(0.0);
                }
            }
            for (uint dd = 0; live && dd < DC; dd++) {
                vec4 b = stage[(DC + dd) * RS4 + tc];
                for (uint w = 0; w < TM / 4; w++) {
                    vec4 a = stage[dd * RS4 + tr * (TM / 4) + w];
                    for (uint i = 0; i < 4; i++) {
                        s[4 * w + i] += a[i] * b;
                    }
                }
            }
        }
        // Scale, cap and mask.
        for (uint e = 0; e < 4; e++) {
            uint j = j0 + 4 * tc + e;
            for (uint w = 0; w < TM / 4; w++) {
                vec4 col;
                for (uint i = 0; i < 4; i++) {
                    uint qi = (TM * tr + 4 * w + i) / hpw;
                    bool seen = j < pc.keys && j <= pc.pos0 + q0 + qi && (!WINDOWED || pc.pos0 + q0 + qi - j < pc.window);
                    float v = s[4 * w + i][e] * pc.scale;
                    col[i] = seen ? (CAPPED ? capped(v, pc.softcap) : v) : negInf;
                }
                St[(4 * tc + e) * RS4 + tr * (TM / 4) + w] = col;
            }
        }
        barrier();
        // Online softmax, SQ invocations a row, each over BKV/SQ keys.
        float mx = negInf;
        for (uint c = sq * (BKV / SQ); c < (sq + 1) * (BKV / SQ); c++) {
            mx = max(mx, St[c * RS4 + sr / 4][sr % 4]);
        }
        red[sq * R + sr] = mx;
        barrier();
        // A row sees no key of a block wholly outside its window: its
        // maximum stays -inf, and so must its alpha and p not be NaN.
        float mNew = m;
        for (uint u = 0; u < SQ; u++) {
            mNew = max(mNew, red[u * R + sr]);
        }
        bool none = WINDOWED && mNew == negInf;
        float alpha = none ? 1.0 : exp(m - mNew), sum = 0.0;
        for (uint c = sq * (BKV / SQ); c < (sq + 1) * (BKV / SQ); c++) {
            float p = none ? 0.0 : exp(St[c * RS4 + sr / 4][sr % 4] - mNew);
            St[c * RS4 + sr / 4][sr % 4] = p;
            sum += p;
        }
        l = l * alpha + sum;
        m = mNew;
        if (sq == 0) {
            alphas[sr / 4][sr % 4] = alpha;
        }
        barrier();
        // O = O * alpha + P V over key slices (the staging area is free:
        // three barriers passed since the last Q/K slice was read).
        for (uint w = 0; w < TM / 4; w++) {
            vec4 al = alphas[tr * (TM / 4) + w];
            for (uint i = 0; i < 4; i++) {
                for (uint k = 0; k < NV; k++) {
                    o[(4 * w + i) * NV + k] *= al[i];
                }
            }
        }
        for (uint c0 = 0; c0 < BKV; c0 += KC) {
            if (c0 > 0) {
                barrier(); // the previous V slice is consumed
            }
            for (uint e = tid; e < KC * HDP4; e += WG) {
                uint c = e / HDP4, j = j0 + c0 + c;
                stage[e] = j < pc.keys ? loadV(j * kvStride + kvh * HD, 4 * (e % HDP4)) : vec4(0.0);
            }
            barrier();
            for (uint c = 0; live && c < KC; c++) {
                vec4 v[NV];
                for (uint k = 0; k < NV; k++) {
                    v[k] = 64 * k + 4 * tc < HDP ? stage[c * HDP4 + 16 * k + tc] : vec4(0.0);
                }
                for (uint w = 0; w < TM / 4; w++) {
                    vec4 p = St[(c0 + c) * RS4 + tr * (TM / 4) + w];
                    for (uint i = 0; i < 4; i++) {
                        for (uint k = 0; k < NV; k++) {
                            o[(4 * w + i) * NV + k] += p[i] * v[k];
                        }
                    }
                }
            }
        }
    }
    red[sq * R + sr] = l; // the last reads of red were three barriers ago
    barrier();
    for (uint i = 0; i < TM; i++) {
        uint r = TM * tr + i, qi = r / hpw;
        if (qi >= bq || q0 + qi >= pc.T) {
            continue;
        }
        float sum = 0.0;
        for (uint u = 0; u < SQ; u++) {
            sum += red[u * R + r];
        }
        uint base = ((q0 + qi) * pc.heads + h0 + r % hpw) * HD;
        for (uint k = 0; k < NV; k++) {
            uint d = 64 * k + 4 * tc;
            vec4 y = o[i * NV + k] / sum;
            if (HD % 4 == 0) {
                if (d < HD) {
                    z4[(base + d) / 4] = y;
                }
            } else {
                for (uint e = 0; e < 4; e++) {
                    if (d + e < HD) {
                        z[base + d + e] = y[e];
                    }
                }
            }
        }
    }
}
