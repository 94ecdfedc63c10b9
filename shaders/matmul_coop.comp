#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
// Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]) on cooperative matrices, the
// same contract as matmul.comp. A workgroup of 8 subgroups of 32 lanes owns a
// BM x BN tile; each subgroup a block of TM x TN 16x16 float32 accumulators
// fed by 16x16x16 float16 products. The host picks the shape (coopTileFor in
// backend/vulkan). With PREFETCH, each step's tiles are loaded into registers
// while the step before multiplies (1.2-1.4x faster on the H200 than
// loading after the barrier, with one workgroup per SM); without it the
// kernel holds fewer registers, so that two workgroups fit an SM.
//
// Accuracy (EXACT, PrecisionExact): X is split into float16 hi + lo
// (x - hi), two products per step, so the result keeps float32's accuracy
// rather than float16's, for weights exact in float16 (1-bit, ternary,
// F16); other weights take WLO below. PrecisionFast rounds X and
// W to float16, one product per step, for any weight format. A tile whose
// inputs exceed float16's range is recomputed in float32.
//
// B16: the weights come decoded to float16 by weights16.comp, once per
// product instead of once per tile of rows of x in every tile, or are F16
// weights read as they are; the grid then runs along x's rows first, so
// the workgroups in flight share their weight tiles in L2. With WLO (exact
// precision, weights not exact in float16) W is split in hi + lo too, by
// weights16.comp with B16 or by each tile without, and a third product adds
// x_hi w_lo: what is left out, x_lo w_lo, is 2^-22 of x w. Both routes
// split with half.glsl's split, so they give the same bits.
//
// GROUPED: a mixture's experts (MatMulExperts), as in matmul.comp: each row
// of workgroups takes its rows and its expert's weight from the groups
// table; neither A16, B16 nor split K.
layout(local_size_x = 256) in;

// The tile shape, chosen per GEMM by the host: each subgroup holds TM x TN
// accumulators (TM <= 4, TN <= 4), and the 8 subgroups stand WGM along M
// by 8 / WGM along N.
// BN must be at least 128 (the result staging below uses 8 KiB of Bhi).
layout(constant_id = 0) const uint TM = 1;
layout(constant_id = 1) const uint TN = 4;
layout(constant_id = 2) const uint WGM = 4;
layout(constant_id = 3) const uint BK = 32; // k per step: 32 or 64
layout(constant_id = 4) const uint EXACT = 1; // 0: PrecisionFast
// A16: x comes converted to float16 by tohalf.comp, in binding 4.
layout(constant_id = 5) const uint A16 = 0;
layout(constant_id = 6) const uint B16 = 0; // with A16
layout(constant_id = 7) const uint WLO = 0; // with EXACT
layout(constant_id = 8) const uint PREFETCH = 1; // 0: each step loads after the barrier
layout(constant_id = 9) const uint GROUPED = 0;
const uint BM = 16 * TM * WGM, BN = 16 * TN * (8 / WGM);
const uint NO_RANGE_FLAGS = 0xFFFFFFFFu; // noRangeFlags in backend/vulkan


layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase; // first word of the block scales
    uint hasBias;
    uint loBase, bigBase; // tohalf.comp's remainders and range flags, with A16
    uint whBase, wLoBase, wBigBase; // weights16.comp's halves, remainders (WLO) and range flags
    // (NO_RANGE_FLAGS: F16 weights, bound here as they are)
    // Split K: workgroup z sums k in [z kChunk, (z + 1) kChunk) (kChunk a
    // multiple of BK) into y[yBase + z M N ...], with no bias; splitk.comp
    // adds the parts. 0: the whole of K into y, no offset.
    uint kChunk, yBase;
    uint basesBase; // with GROUPED: where this weight's experts' words start in the table
} pc;

#define GROUPS_BINDING 6
#include "groups.glsl"

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"
#include "half.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; }; // x, when K % 4 == 0
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
layout(std430, binding = 4) readonly buffer XH { uvec4 xh[]; };
layout(std430, binding = 4) readonly buffer XHW { uint xhw[]; };
layout(std430, binding = 5) readonly buffer WH { uvec4 wh[]; };
layout(std430, binding = 5) readonly buffer WHW { uint whw[]; };

const uint CH = BK / 8; // chunks of 8 halves per tile row
const uint AH = (BM * CH + 255) / 256, BH = BN * CH / 256; // chunks per thread
// Shared rows hold BK halves plus 8 of padding, so that the rows a
// cooperative load reads start in different banks; in uvec4s of 8 halves:
const uint SROW = (BK + 8) / 8;

shared uvec4 Ahi[BM * SROW], Alo[BM * SROW * EXACT + 1];
shared uvec4 Bhi[BN * SROW], Blo[BN * SROW * WLO + 1];
shared uint outOfRange;


float elemA(uint m, uint k) { return m < mEnd && k < pc.K ? x[m * pc.K + k] : 0.0; }

// elemsA reads x[m][k..k+8), in two 16-byte loads where rows are aligned.
void elemsA(uint m, uint k, out float v[8]) {
    if (pc.K % 4 == 0 && m < mEnd && k + 8 <= pc.K) {
        uint i = (m * pc.K + k) / 4;
        vec4 a = x4[i], b = x4[i + 1];
        v = float[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
        return;
    }
    [[unroll]] for (uint i = 0; i < 8; i++) {
        v[i] = elemA(m, k + i);
    }
}

// halvesA reads x[m][k..k+8) as tohalf.comp left it (A16; K % 8 == 0).
void halvesA(uint m, uint k, out uvec4 hi, out uvec4 lo) {
    hi = lo = uvec4(0);
    if (m < mEnd && k < pc.K) {
        uint i = (m * pc.K + k) / 8;
        hi = xh[i];
        if (EXACT != 0) {
            lo = xh[pc.loBase + i];
        }
    }
}

// halvesB reads W[n][k..k+8) as weights16.comp left it (B16; K % 8 == 0).
void halvesB(uint n, uint k, out uvec4 hi, out uvec4 lo) {
    hi = lo = uvec4(0);
    if (n < pc.N && k < pc.K) {
        uint i = (n * pc.K + k) / 8;
        hi = wh[pc.whBase + i];
        if (WLO != 0) {
            lo = wh[pc.wLoBase + i];
        }
    }
}

void elemsB(uint n, uint k, out float v[8]) {
    if (n < pc.N && k < pc.K) {
        weights8(n, k, v);
        return;
    }
    [[unroll]] for (uint i = 0; i < 8; i++) {
        v[i] = 0.0;
    }
}

// writeStaged writes the subgroup's 16x16 result staged at Bhi[64 * sg],
// from y[yOff + m N + n] on, clipping edges and adding the bias.
void writeStaged(uint yOff, uint m, uint n) {
    uint base = 64 * gl_SubgroupID;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < 256; e += 32) {
        uint r = m + e / 16, c = n + e % 16;
        if (r < mEnd && c < pc.N) {
            y[yOff + r * pc.N + c] = uintBitsToFloat(Bhi[base + e / 4][e % 4]) + (pc.hasBias != 0 ? bias[c] : 0.0);
        }
    }
    subgroupBarrier();
}

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// Each thread carries its chunks of 8 along k of a step's tiles in
// registers (A's BM rows, then B's BN rows); with PREFETCH the next step's
// are loaded while this step's products run.
float ra[AH][8], rb[BH][8];
uvec4 rah[AH], ral[AH], rbh[BH], rbl[BH]; // with A16, B16
uint m0, n0;

// fetch loads the step at k into the registers; past K it reads zeros.
void fetch(uint k) {
    uint tid = gl_LocalInvocationIndex;
    [[unroll]] for (uint h = 0; h < AH; h++) {
        uint id = tid + 256 * h;
        if (A16 != 0) {
            halvesA(id < BM * CH ? m0 + id / CH : mEnd, k + 8 * (id % CH), rah[h], ral[h]);
        } else {
            elemsA(id < BM * CH ? m0 + id / CH : mEnd, k + 8 * (id % CH), ra[h]);
        }
    }
    [[unroll]] for (uint h = 0; h < BH; h++) {
        uint id = tid + 256 * h;
        if (B16 != 0) {
            halvesB(n0 + id / CH, k + 8 * (id % CH), rbh[h], rbl[h]);
        } else {
            elemsB(n0 + id / CH, k + 8 * (id % CH), rb[h]);
        }
    }
}

// stage stores the registers' step into the shared tiles; it reports
// whether every value fits float16.
bool stage() {
    uint tid = gl_LocalInvocationIndex;
    bool ok = true;
    [[unroll]] for (uint h = 0; h < AH; h++) {
        uint id = tid + 256 * h, r = id / CH, c = id % CH;
        if (id < BM * CH && A16 != 0) {
            Ahi[r * SROW + c] = rah[h];
            if (EXACT != 0) {
                Alo[r * SROW + c] = ral[h];
            }
        } else if (id < BM * CH) {
            ok = ok && fitsHalf(ra[h]);
            if (EXACT != 0) {
                split(ra[h], Ahi[r * SROW + c], Alo[r * SROW + c]);
            } else {
                Ahi[r * SROW + c] = round16(ra[h]);
            }
        }
    }
    [[unroll]] for (uint h = 0; h < BH; h++) {
        uint id = tid + 256 * h, r = id / CH, c = id % CH;
        if (B16 != 0) {
            Bhi[r * SROW + c] = rbh[h];
            if (WLO != 0) {
                Blo[r * SROW + c] = rbl[h];
            }
        } else if (EXACT != 0) {
            uvec4 hi, lo; // without WLO, lo is 0: the weights are exact in float16
            split(rb[h], hi, lo);
            Bhi[r * SROW + c] = hi;
            if (WLO != 0) {
                ok = ok && fitsHalf(rb[h]);
                Blo[r * SROW + c] = lo;
            }
        } else {
            ok = ok && fitsHalf(rb[h]);
            Bhi[r * SROW + c] = round16(rb[h]);
        }
    }
    return ok;
}

void main() {
    uvec2 tile = B16 != 0 ? gl_WorkGroupID.yx : gl_WorkGroupID.xy;
    n0 = tile.x * BN;
    m0 = tile.y * BM;
    mEnd = pc.M;
    if (GROUPED != 0) {
        m0 = groupRows(gl_WorkGroupID.y, pc.basesBase);
        if (m0 >= mEnd) {
            return; // an empty entry of the groups table (experttiles.comp)
        }
    }
    uint tid = gl_LocalInvocationIndex, sg = gl_SubgroupID;
    uint wm = 16 * TM * (sg / (8 / WGM)), wn = 16 * TN * (sg % (8 / WGM));
    uint kBegin = gl_WorkGroupID.z * pc.kChunk, kEnd = pc.kChunk != 0 ? min(pc.K, kBegin + pc.kChunk) : pc.K;
    uint yOff = pc.yBase + gl_WorkGroupID.z * pc.M * pc.N;
    if (tid == 0) {
        outOfRange = 0;
    }
    // Matrices are indexed by constants only: the macros unroll by hand.
    // Indexed in loops of two or more rows of accumulators, the driver ran
    // 4x slower (kept them in memory, presumably).
    ACC acc[16]; // TM x TN, at 4 * i + j
#define EACH(F) F(0, 0) F(0, 1) F(0, 2) F(0, 3) F(1, 0) F(1, 1) F(1, 2) F(1, 3) \
    F(2, 0) F(2, 1) F(2, 2) F(2, 3) F(3, 0) F(3, 1) F(3, 2) F(3, 3)
#define ZERO(I, J) if (I < TM && J < TN) { acc[4 * I + J] = ACC(0.0); }
    EACH(ZERO)
    bool ok = true;
    if (A16 != 0) {
        for (uint r = tid; r < BM; r += 256) {
            ok = ok && (m0 + r >= mEnd || xhw[pc.bigBase + m0 + r] == 0);
        }
    }
    if (B16 != 0) {
        for (uint r = tid; r < BN; r += 256) {
            ok = ok && (n0 + r >= pc.N || pc.wBigBase == NO_RANGE_FLAGS || whw[pc.wBigBase + n0 + r] == 0);
        }
    }
    if (PREFETCH != 0) {
        fetch(kBegin);
    }
    for (uint k0 = kBegin; k0 < kEnd; k0 += BK) {
        if (PREFETCH == 0) {
            fetch(k0);
        }
        ok = stage() && ok;
        barrier();
        // Past K these read zeros (the bounds); past kEnd of a split
        // product, the next part's first step, which goes unused.
        if (PREFETCH != 0) {
            fetch(k0 + BK);
        }
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
            MAT16 ah[4], al[4], bh[4], bl[4];
#define LOAD_A(I) \
    if (I < TM) { \
        coopMatLoadNV(ah[I], Ahi, (wm + 16 * I) * SROW + kk / 8, SROW, false); \
        if (EXACT != 0) { \
            coopMatLoadNV(al[I], Alo, (wm + 16 * I) * SROW + kk / 8, SROW, false); \
        } \
    }
            LOAD_A(0) LOAD_A(1) LOAD_A(2) LOAD_A(3)
            // B = W^T is K x N; W's rows are its columns, so column-major.
#define LOAD_B(J) \
    if (J < TN) { \
        coopMatLoadNV(bh[J], Bhi, (wn + 16 * J) * SROW + kk / 8, SROW, true); \
        if (WLO != 0) { \
            coopMatLoadNV(bl[J], Blo, (wn + 16 * J) * SROW + kk / 8, SROW, true); \
        } \
    }
            LOAD_B(0) LOAD_B(1) LOAD_B(2) LOAD_B(3)
#define MMA(I, J) \
    if (I < TM && J < TN) { \
        acc[4 * I + J] = coopMatMulAddNV(ah[I], bh[J], acc[4 * I + J]); \
        if (EXACT != 0) { \
            acc[4 * I + J] = coopMatMulAddNV(al[I], bh[J], acc[4 * I + J]); \
        } \
        if (WLO != 0) { \
            acc[4 * I + J] = coopMatMulAddNV(ah[I], bl[J], acc[4 * I + J]); \
        } \
    }
            EACH(MMA)
        }
        barrier();
    }
    if (!ok) {
        atomicOr(outOfRange, 1u);
    }
    barrier();
    if (outOfRange != 0) {
        // Rare: recompute the tile in float32, one output per step.
        for (uint e = tid; e < BM * BN; e += 256) {
            uint m = m0 + e / BN, n = n0 + e % BN;
            if (m >= mEnd || n >= pc.N) {
                continue;
            }
            float sum = 0.0;
            for (uint k = kBegin; k < kEnd; k += 8) {
                float v[8];
                elemsB(n, k, v);
                for (uint i = 0; i < 8; i++) {
                    sum += elemA(m, k + i) * v[i];
                }
            }
            y[yOff + m * pc.N + n] = sum + (pc.hasBias != 0 ? bias[n] : 0.0);
        }
        return;
    }
    // Each subgroup stages its 16x16 results through 1 KiB of Bhi.
#define STORE(I, J) \
    if (I < TM && J < TN) { \
        coopMatStoreNV(acc[4 * I + J], Bhi, 64 * sg, 4, false); \
        writeStaged(yOff, m0 + wm + 16 * I, n0 + wn + 16 * J); \
    }
    EACH(STORE)
}
