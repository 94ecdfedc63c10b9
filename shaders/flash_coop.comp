#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
// flash.comp on cooperative matrices. PrecisionFast: Q, K, V and the
// probabilities in float16, scores and outputs summed in float32, the online
// softmax in float32. EXACT (PrecisionExact): each of them split into
// float16 hi + lo (see half.glsl), three products per step (hi hi, lo hi,
// hi lo; lo lo, 2^-22 of the rest, is left out), so the output keeps
// float32's accuracy to a few roundings. A workgroup of SG subgroups takes R = 16 SG rows of
// (query, head), the heads of one GQA group as flash.comp does, 16 rows a
// subgroup. Per block of BC keys, staged in float16 by the workgroup, each
// subgroup multiplies its Q rows (held as matrices all along) by K^T,
// stages the scores, updates its rows' softmax (two lanes a row, each over
// half the block), and adds the probabilities times V to its output, which
// stays in accumulator matrices from block to block. A cooperative matrix
// cannot be scaled row by row, so the shift of a row's exponentials is kept
// until its maximum passes it by more than SLACK, and only then does the
// output take the round trip through shared memory to be rescaled (mostly
// in the first blocks). The probabilities are then at most e^SLACK, and
// they enter the products times PSCALE (at most 55,900, which float16
// holds), so that only a probability under 2^-24 / PSCALE is lost, not one
// under 2^-24 (a sum of thousands of those would show beside float32's
// rounding); the output is divided by PSCALE at the end. A workgroup
// that meets an input past float16's range computes its rows again in
// float32 (slowly: it is rare), as matmul_coop.comp does its tiles.
// With KV16, K and V come in float16 from tohalf.comp (hi and lo, a range
// flag per key), converted once rather than in every workgroup that reads
// them. (Loading each block while the one before multiplies was slower: it
// took 234-255 registers.)
// With CAPTURE it also writes the scores ([heads, T, keys], scaled, capped,
// masked: what scores.comp writes) as it computes them, and -inf for the
// keys its blocks skip unless tailsHeld says the scores hold them already
// (a prefill of the same layout wrote them); softmax.comp then makes the
// pattern of them.
layout(local_size_x_id = 3) in;
layout(constant_id = 0) const uint HD = 128; // head dim: a multiple of 16, at most 128
layout(constant_id = 1) const bool WINDOWED = false;
layout(constant_id = 2) const bool CAPPED = false;
layout(constant_id = 3) const uint WG = 128; // invocations: 32 per subgroup, 4 or 8 subgroups
layout(constant_id = 4) const uint EXACT = 0;
layout(constant_id = 5) const uint KV16 = 0;
// APART: K and V of a block are staged in turn in one region (exact
// precision at 128 rows, whose halves would not fit both in 48 KiB), at
// the cost of a third barrier per block.
layout(constant_id = 6) const uint APART = 0;

#define BC 32
const uint SG = WG / 32, R = 16 * SG;
const uint NT = HD / 16;        // 16-dim tiles of a head
const uint C8 = HD / 8;         // chunks of 8 dims of a row
const uint KROW = (HD + 8) / 8; // uvec4s of a staged Q, K or V row (8 halves of padding)
const uint PROW = (BC + 8) / 8; // uvec4s of a staged probability row
const uint SROW = BC / 4 + 1;   // vec4s of a staged score row
// A subgroup's share of SP: its scores, then (when read) its probabilities
// and, at a rescale and at the end, its output tiles one at a time.
const uint SPS = EXACT != 0 ? 2 * 16 * PROW : 16 * SROW; // the larger (BC = 32)
const uint VROW = APART != 0 ? 0 : BC; // the staged row of V's first key
const uint LO = (VROW + BC) * KROW; // where KV's lo halves start, with EXACT
const uint QG = LO / KROW; // Q's rows staged at a time
const float SLACK = 4.0, PSCALE = 1024.0;

layout(push_constant) uniform Push {
    uint T, keys, heads, kvHeads, hd, pos0;
    float scale;
    uint window;
    float softcap;
    uint hpw; // heads per workgroup: divides heads/kvHeads, at most R
    uint tailsHeld; // with CAPTURE: the scores hold the -inf of the keys no block takes
    uint kvLoBase, kvBigBase; // with KV16: tohalf.comp's remainders and range flags
} pc;

layout(std430, binding = 0) readonly buffer Q4 { vec4 q4[]; };
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 kc4[]; };
layout(std430, binding = 1) readonly buffer K { float kc[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 vc4[]; };
layout(std430, binding = 2) readonly buffer V { float vc[]; };
layout(std430, binding = 3) writeonly buffer Z4 { vec4 z4[]; };
layout(std430, binding = 3) writeonly buffer Z { float z[]; };
#ifdef CAPTURE
layout(std430, binding = 4) writeonly buffer Scores { float sc[]; };
layout(std430, binding = 4) writeonly buffer Scores4 { vec4 sc4[]; };
#endif
layout(std430, binding = 5) readonly buffer KH { uvec4 kh16[]; };
layout(std430, binding = 5) readonly buffer KHW { uint khw[]; };
layout(std430, binding = 6) readonly buffer VH { uvec4 vh16[]; };
layout(std430, binding = 6) readonly buffer VHW { uint vhw[]; };

shared uvec4 KV[(1 + EXACT) * LO]; // K then V of a block, or one of them (APART); hi, then lo; Q's rows (QG at a time) before
shared uvec4 SP[SG * SPS];      // float32 bits or float16 pairs, each subgroup's own
shared float pair[WG];          // what the two lanes of a row tell each other
shared uint outOfRange;

#include "attend.glsl"
#include "half.glsl"

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
// Matrices are indexed by constants only (see matmul_coop.comp).
#define EACH(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)

// half8 packs 8 floats as float16.
uvec4 half8(vec4 a, vec4 b) {
    return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

// partner is v of the other lane of this lane's row.
float partner(float v) {
    uint at = 32 * gl_SubgroupID + gl_SubgroupInvocationID;
    pair[at] = v;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    v = pair[at ^ 1];
    subgroupBarrier(); // read before the next call writes
    return v;
}

// split8 packs 8 floats as float16: rounded, or (EXACT) as hi and lo.
void split8(vec4 a, vec4 b, out uvec4 hi, out uvec4 lo) {
    lo = uvec4(0);
    if (EXACT == 0) {
        hi = half8(a, b);
        return;
    }
    split(float[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w), hi, lo);
}

// inputs8 is split8 of 8 inputs, noting those past float16's range.
void inputs8(vec4 a, vec4 b, out uvec4 hi, out uvec4 lo) {
    if (any(greaterThan(max(abs(a), abs(b)), vec4(65504.0)))) {
        atomicOr(outOfRange, 1u); // from any invocation: a plain store would race
    }
    split8(a, b, hi, lo);
}

// float32Row is the fallback: row's output computed in float32, by the
// two invocations given the row (part 0 and 1 take half its dims each).
void float32Row(uint row, uint part, uint q0, uint h0, uint kvh, uint hpw, uint jStart) {
    uint qi = row / hpw;
    if (q0 + qi >= pc.T || qi >= R / hpw) {
        return;
    }
    uint p = pc.pos0 + q0 + qi, qBase = ((q0 + qi) * pc.heads + h0 + row % hpw) * HD;
    uint kvStride = pc.kvHeads * HD, end = min(pc.keys, p + 1);
    float mx = uintBitsToFloat(0xff800000u);
    for (uint pass = 0; pass <= HD / 32; pass++) {
        // Pass 0 finds the maximum; each later one 16 of this part's dims.
        uint d0 = part * HD / 2 + 16 * (pass - 1);
        float acc[16], sum = 0.0;
        for (uint i = 0; i < 16; i++) {
            acc[i] = 0.0;
        }
        for (uint j = jStart; j < end; j++) {
            if (WINDOWED && p - j >= pc.window) {
                continue;
            }
            float s = 0.0;
            for (uint d = 0; d < HD; d++) {
                s += q[qBase + d] * kc[j * kvStride + kvh * HD + d];
            }
            s *= pc.scale;
            s = CAPPED ? capped(s, pc.softcap) : s;
            if (pass == 0) {
                mx = max(mx, s);
#ifdef CAPTURE
                if (part == 0) {
                    sc[((h0 + row % hpw) * pc.T + q0 + qi) * pc.keys + j] = s;
                }
#endif
                continue;
            }
            float e = exp(s - mx);
            sum += e;
            for (uint i = 0; i < 16; i++) {
                acc[i] += e * vc[j * kvStride + kvh * HD + d0 + i];
            }
        }
        if (pass > 0) {
            for (uint i = 0; i < 16; i++) {
                z[qBase + d0 + i] = acc[i] / sum;
            }
        }
    }
}

// stageKV stages K (withK) and V (withV) of the block of keys from j0 in
// KV, in float16 (hi, and lo at exact precision), noting inputs past
// float16's range.
void stageKV(uint j0, uint kvh, bool withK, bool withV) {
    uint kvStride = pc.kvHeads * HD;
    for (uint id = gl_LocalInvocationIndex; id < BC * C8; id += WG) {
        uint c = id / C8, d = id % C8, j = j0 + c;
        uvec4 kh = uvec4(0), vh = uvec4(0), kl = uvec4(0), vl = uvec4(0);
        if (j < pc.keys && KV16 != 0) {
            uint at = (j * kvStride + kvh * HD) / 8 + d;
            if (withK) {
                kh = kh16[at];
                kl = EXACT != 0 ? kh16[pc.kvLoBase + at] : uvec4(0);
            }
            if (withV) {
                vh = vh16[at];
                vl = EXACT != 0 ? vh16[pc.kvLoBase + at] : uvec4(0);
            }
            if (d == 0 && ((withK ? khw[pc.kvBigBase + j] : 0) | (withV ? vhw[pc.kvBigBase + j] : 0)) != 0) {
                atomicOr(outOfRange, 1u);
            }
        } else if (j < pc.keys) {
            uint at = (j * kvStride + kvh * HD + 8 * d) / 4;
            if (withK) {
                inputs8(kc4[at], kc4[at + 1], kh, kl);
            }
            if (withV) {
                inputs8(vc4[at], vc4[at + 1], vh, vl);
            }
        }
        if (withK) {
            KV[c * KROW + d] = kh;
            if (EXACT != 0) {
                KV[LO + c * KROW + d] = kl;
            }
        }
        if (withV) {
            KV[(VROW + c) * KROW + d] = vh;
            if (EXACT != 0) {
                KV[LO + (VROW + c) * KROW + d] = vl;
            }
        }
    }
}

void main() {
    const float negInf = uintBitsToFloat(0xff800000u);
    uint tid = gl_LocalInvocationIndex, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint hpw = pc.hpw, bq = R / hpw;
    // The last query blocks see the most keys: start them first.
    uint q0 = (gl_NumWorkGroups.x - 1 - gl_WorkGroupID.x) * bq;
    uint h0 = gl_WorkGroupID.y * hpw, kvh = h0 / (pc.heads / pc.kvHeads);
    uint qEnd = min(q0 + bq, pc.T);
    uint kEnd = min(pc.keys, pc.pos0 + qEnd);

    if (tid == 0) {
        outOfRange = 0;
    }
    barrier();
    // Stage Q's rows in float16 (padding rows as zeros), QG at a time
    // (what KV holds), and keep this subgroup's as matrices.
    MAT16 q[8], ql[8];
    for (uint g = 0; g < R; g += QG) {
        if (g > 0) {
            barrier(); // the last group's rows are loaded
        }
        for (uint id = tid; id < QG * C8; id += WG) {
            uint row = g + id / C8, c = id % C8, qi = row / hpw;
            uvec4 h = uvec4(0), lo = uvec4(0);
            if (qi < bq && q0 + qi < pc.T) {
                uint at = (((q0 + qi) * pc.heads + h0 + row % hpw) * HD + 8 * c) / 4;
                inputs8(q4[at], q4[at + 1], h, lo);
            }
            KV[(id / C8) * KROW + c] = h;
            if (EXACT != 0) {
                KV[LO + (id / C8) * KROW + c] = lo;
            }
        }
        barrier();
        if (16 * sg >= g && 16 * sg < g + QG) {
#define LOAD_Q(I) \
    if (I < NT) { \
        coopMatLoadNV(q[I], KV, (16 * sg - g) * KROW + 2 * I, KROW, false); \
        if (EXACT != 0) { \
            coopMatLoadNV(ql[I], KV, LO + (16 * sg - g) * KROW + 2 * I, KROW, false); \
        } \
    }
            EACH(LOAD_Q)
        }
    }

    // This lane's row of the subgroup's 16, and which half of a block's keys
    // (in the softmax) or of each 16-dim output tile it takes.
    uint r = lane / 2, half_ = lane % 2, row = 16 * sg + r, qi = row / hpw;
    bool rowLive = qi < bq && q0 + qi < pc.T;
    uint p = pc.pos0 + q0 + qi; // the query's position
    float m = negInf, l = 0.0; // the row's shift and this lane's part of its sum
    ACC o[8];
#define ZERO(I) if (I < NT) { o[I] = ACC(0.0); }
    EACH(ZERO)
    uint sBase = sg * SPS, pBase = sg * SPS;

    uint jStart = 0;
    if (WINDOWED && pc.pos0 + q0 + 1 > pc.window) {
        jStart = (pc.pos0 + q0 + 1 - pc.window) / BC * BC;
    }
    for (uint j0 = jStart; j0 < kEnd; j0 += BC) {
        barrier(); // every subgroup is done with the last block (or with Q)
        stageKV(j0, kvh, true, APART == 0);
        barrier();

        // Scores: this subgroup's 16 rows by the block's keys, 16 at a time.
        ACC s0 = ACC(0.0), s1 = ACC(0.0);
#define QK(I) \
    if (I < NT) { \
        MAT16 k0, k1; \
        coopMatLoadNV(k0, KV, 2 * I, KROW, true); \
        coopMatLoadNV(k1, KV, 16 * KROW + 2 * I, KROW, true); \
        s0 = coopMatMulAddNV(q[I], k0, s0); \
        s1 = coopMatMulAddNV(q[I], k1, s1); \
        if (EXACT != 0) { \
            s0 = coopMatMulAddNV(ql[I], k0, s0); \
            s1 = coopMatMulAddNV(ql[I], k1, s1); \
            coopMatLoadNV(k0, KV, LO + 2 * I, KROW, true); \
            coopMatLoadNV(k1, KV, LO + 16 * KROW + 2 * I, KROW, true); \
            s0 = coopMatMulAddNV(q[I], k0, s0); \
            s1 = coopMatMulAddNV(q[I], k1, s1); \
        } \
    }
        EACH(QK)
        coopMatStoreNV(s0, SP, sBase, SROW, false);
        coopMatStoreNV(s1, SP, sBase + 4, SROW, false);
        if (APART != 0) {
            barrier(); // every subgroup is done with K
            stageKV(j0, kvh, false, true); // its loads in flight through the softmax
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // Online softmax: the two lanes of a row take 16 keys each.
        float sv[16], mx = negInf;
        [[unroll]] for (uint c = 0; c < 16; c++) {
            uint col = 16 * half_ + c, j = j0 + col;
            float v = uintBitsToFloat(SP[sBase + r * SROW + col / 4][col % 4]) * pc.scale;
            bool seen = rowLive && j < pc.keys && j <= p && (!WINDOWED || p - j < pc.window);
            sv[c] = seen ? (CAPPED ? capped(v, pc.softcap) : v) : negInf;
            mx = max(mx, sv[c]);
#ifdef CAPTURE
            SP[sBase + r * SROW + col / 4][col % 4] = floatBitsToUint(sv[c]);
#endif
        }
#ifdef CAPTURE
        // The block's scores, back in SP, go out as whole rows: 32 lanes
        // write four rows' 128 contiguous bytes each (one when keys is not a
        // multiple of 4), where a lane a row wrote 16 rows' scattered
        // floats.
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (pc.keys % 4 == 0) {
            [[unroll]] for (uint i = 0; i < 4; i++) {
                uint rr = 4 * i + lane / 8, c = lane % 8, rowR = 16 * sg + rr, qr = rowR / hpw;
                if (qr < bq && q0 + qr < pc.T && j0 + 4 * c < pc.keys) {
                    sc4[(((h0 + rowR % hpw) * pc.T + q0 + qr) * pc.keys + j0) / 4 + c] = uintBitsToFloat(SP[sBase + rr * SROW + c]);
                }
            }
        } else {
            for (uint rr = 0; rr < 16; rr++) {
                uint j = j0 + lane, rowR = 16 * sg + rr, qr = rowR / hpw;
                if (qr < bq && q0 + qr < pc.T && j < pc.keys) {
                    sc[((h0 + rowR % hpw) * pc.T + q0 + qr) * pc.keys + j] = uintBitsToFloat(SP[sBase + rr * SROW + lane / 4][lane % 4]);
                }
            }
        }
#endif
        mx = max(mx, partner(mx)); // its barriers also end the reads of the scores
        // A row whose output is still 0 (no key seen yet) takes the block's
        // maximum as its shift, which stays -inf for a row that sees none
        // (a window's, a padding row): its probabilities must not be NaN.
        bool jump = m != negInf && mx > m + SLACK;
        float alpha = 1.0;
        if (jump) {
            alpha = exp(m - mx);
            m = mx;
        } else if (m == negInf) {
            m = mx;
        }
        if (subgroupMax(jump ? 1u : 0u) != 0) {
#define RESCALE(I) \
    if (I < NT) { \
        coopMatStoreNV(o[I], SP, sBase, SROW, false); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        uint at = sBase + r * SROW + 2 * half_; \
        SP[at] = floatBitsToUint(uintBitsToFloat(SP[at]) * alpha); \
        SP[at + 1] = floatBitsToUint(uintBitsToFloat(SP[at + 1]) * alpha); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        coopMatLoadNV(o[I], SP, sBase, SROW, false); \
        subgroupBarrier(); \
    }
            EACH(RESCALE)
        }
        bool none = m == negInf;
        float sum = 0.0;
        [[unroll]] for (uint c = 0; c < 16; c += 8) {
            float e[8];
            [[unroll]] for (uint i = 0; i < 8; i++) {
                e[i] = none ? 0.0 : exp(sv[c + i] - m);
                sum += e[i];
            }
            uvec4 hi, lo;
            split8(PSCALE * vec4(e[0], e[1], e[2], e[3]), PSCALE * vec4(e[4], e[5], e[6], e[7]), hi, lo);
            SP[pBase + r * PROW + 2 * half_ + c / 8] = hi;
            if (EXACT != 0) {
                SP[pBase + 16 * PROW + r * PROW + 2 * half_ + c / 8] = lo;
            }
        }
        l = l * alpha + sum;
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (APART != 0) {
            barrier(); // V is staged
        }

        [[unroll]] for (uint kk = 0; kk < BC / 16; kk++) {
            MAT16 pa;
            MAT16 pl;
            coopMatLoadNV(pa, SP, pBase + 2 * kk, PROW, false);
            if (EXACT != 0) {
                coopMatLoadNV(pl, SP, pBase + 16 * PROW + 2 * kk, PROW, false);
            }
#define PV(I) \
    if (I < NT) { \
        MAT16 vb; \
        coopMatLoadNV(vb, KV, (VROW + 16 * kk) * KROW + 2 * I, KROW, false); \
        o[I] = coopMatMulAddNV(pa, vb, o[I]); \
        if (EXACT != 0) { \
            o[I] = coopMatMulAddNV(pl, vb, o[I]); \
            coopMatLoadNV(vb, KV, LO + (VROW + 16 * kk) * KROW + 2 * I, KROW, false); \
            o[I] = coopMatMulAddNV(pa, vb, o[I]); \
        } \
    }
            EACH(PV)
        }
    }

#ifdef CAPTURE
    // The keys no block took, before the first and past the last (half of
    // a causal prefill's scores): the subgroup writes its rows one by one.
    uint jEnd = min(pc.keys, jStart + (kEnd - jStart + BC - 1) / BC * BC);
    for (uint rr = 0; rr < 16 && pc.tailsHeld == 0; rr++) {
        uint rowR = 16 * sg + rr, qr = rowR / hpw;
        if (qr >= bq || q0 + qr >= pc.T) {
            continue;
        }
        uint at = ((h0 + rowR % hpw) * pc.T + q0 + qr) * pc.keys;
        if (pc.keys % 4 == 0) { // jStart and jEnd are then multiples of 4 too
            for (uint j = 4 * lane; j < jStart; j += 128) {
                sc4[(at + j) / 4] = vec4(negInf);
            }
            for (uint j = jEnd + 4 * lane; j < pc.keys; j += 128) {
                sc4[(at + j) / 4] = vec4(negInf);
            }
            continue;
        }
        for (uint j = lane; j < jStart; j += 32) {
            sc[at + j] = negInf;
        }
        for (uint j = jEnd + lane; j < pc.keys; j += 32) {
            sc[at + j] = negInf;
        }
    }
    memoryBarrierBuffer(); // the fallback's scores land after these
#endif
    barrier();
    if (outOfRange != 0) {
        float32Row(tid / 2, tid % 2, q0, h0, kvh, hpw, jStart);
        return;
    }
    // Each lane writes its 8 columns of each tile of its row, divided by
    // the row's sum, through the staging area.
    float total = PSCALE * (l + partner(l));
    uint base = ((q0 + qi) * pc.heads + h0 + row % hpw) * HD;
#define OUT(I) \
    if (I < NT) { \
        coopMatStoreNV(o[I], SP, sBase, SROW, false); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        if (rowLive) { \
            uint at = (base + 16 * I + 8 * half_) / 4; \
            z4[at] = uintBitsToFloat(SP[sBase + r * SROW + 2 * half_]) / total; \
            z4[at + 1] = uintBitsToFloat(SP[sBase + r * SROW + 2 * half_ + 1]) / total; \
        } \
        subgroupBarrier(); \
    }
    EACH(OUT)
}
