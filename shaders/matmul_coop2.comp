#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// Y[m][n] = sum_k X[m][k] W[n][k] on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2): the workgroup holds one BN x BM float32
// accumulator, fed by BN x BK and BK x BM float16 matrices loaded straight
// from memory, and the driver tiles the product itself. At exact precision
// (EXACT) X comes in float16 hi + lo halves and each step adds W X_lo too;
// with WLO, W's lo halves as well (W_lo X_hi), as matmul_coop.comp does.
// Each step's tiles go through shared memory: loaded from the buffers
// straight, the matrices ran at a quarter of matmul_coop.comp's speed on
// an H100. With TENSOR they are loaded from the buffers by tensor loads
// instead, and the driver stages them.
// glslang 12 writes it as GL_NV_cooperative_matrix with gl_ScopeWorkgroup;
// shaders.KHRCoop makes it SPV_KHR_cooperative_matrix when it is loaded,
// and with TENSOR shaders.TensorLoads makes the loads from buffers tensor
// loads (SPV_NV_tensor_addressing).
//
// X comes in float16 from tohalf.comp (binding 3), W from weights16.comp or
// as F16 weights are (binding 4). The workgroup takes rows [m0, m0 + BM)
// of the M rows from mBase on, whole: the host pads tohalf.comp's buffer
// and lets the last, partial tile store into a scratch buffer. A tile whose
// rows of X or W do not fit float16 (the range flags) is computed in
// float32 from X (binding 0) and W in its format (binding 1) instead, as
// matmul_coop.comp does.
//
// Split along K (kChunk != 0): workgroup z sums k in [z kChunk, (z + 1)
// kChunk) into part z, partStride elements after part z - 1 from yBase on,
// which splitk.comp adds up; the last tile, partial or not, is stored whole
// into its part's padding.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BN = 128; // rows of W per workgroup
layout(constant_id = 2) const uint BM = 256; // rows of X per workgroup
layout(constant_id = 3) const uint BK = 64;
layout(constant_id = 4) const uint EXACT = 0;
layout(constant_id = 5) const uint WLO = 0; // with EXACT
const uint NO_RANGE_FLAGS = 0xFFFFFFFFu; // noRangeFlags in backend/vulkan

layout(push_constant) uniform Push {
    uint M, N, K; // N % BN == 0, K % BK == 0
    uint scaleBase;
    uint mBase; // X's first row
    uint yBase; // where that row's outputs start in Y
    uint loBase, bigBase; // tohalf.comp's remainders (uvec4s, EXACT) and range flags (a word per row of X from row 0)
    uint whBase, wLoBase, wBigBase; // W's halves and remainders (uvec4s, WLO) and range flags (NO_RANGE_FLAGS: F16 weights)
    uint kChunk, partStride; // kChunk a multiple of BK; 0: K whole
} pc;

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer XH { uvec4 xh[]; };
layout(std430, binding = 3) readonly buffer XHW { uint xhw[]; };
layout(std430, binding = 4) readonly buffer WH { uvec4 wh[]; };
layout(std430, binding = 4) readonly buffer WHW { uint whw[]; };

shared uint outOfRange;
// A step's tiles, a row of BK halves in STEP uvec4s and one more, so that
// neighbouring rows start in other banks; x's and W's lo halves only where
// they are multiplied.
const uint STEP = BK / 8, ROW = STEP + 1;
#ifndef TENSOR
shared uvec4 sa[BN * ROW];
shared uvec4 sb[BM * ROW];
shared uvec4 sbl[EXACT * BM * ROW + 1];
shared uvec4 sal[WLO * BN * ROW + 1];
#endif

void main() {
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, stride = pc.K / 8;
    const uint tid = gl_LocalInvocationIndex, lanes = gl_WorkGroupSize.x;
    const uint kBegin = gl_WorkGroupID.z * pc.kChunk, kEnd = pc.kChunk != 0 ? min(pc.K, kBegin + pc.kChunk) : pc.K;
    const uint yOff = pc.yBase + gl_WorkGroupID.z * pc.partStride;
    if (tid == 0) {
        outOfRange = 0;
    }
    barrier();
    bool ok = true;
    for (uint r = tid; r < BM; r += lanes) {
        ok = ok && (m0 + r >= pc.M || xhw[pc.bigBase + pc.mBase + m0 + r] == 0);
    }
    for (uint r = tid; r < BN; r += lanes) {
        ok = ok && (pc.wBigBase == NO_RANGE_FLAGS || whw[pc.wBigBase + n0 + r] == 0);
    }
    if (!ok) {
        atomicOr(outOfRange, 1u);
    }
    barrier();
    if (outOfRange != 0) {
        // Rare: the tile in float32, one output per step.
        for (uint e = tid; e < BM * BN; e += lanes) {
            uint m = m0 + e / BN, n = n0 + e % BN;
            if (m >= pc.M) {
                continue;
            }
            float sum = 0.0;
            for (uint k = kBegin; k < kEnd; k += 8) {
                float v[8];
                weights8(n, k, v);
                for (uint i = 0; i < 8; i++) {
                    sum += x[(pc.mBase + m) * pc.K + k + i] * v[i];
                }
            }
            y[yOff + m * pc.N + n] = sum;
        }
        return;
    }
    fcoopmatNV<32, gl_ScopeWorkgroup, BN, BM> acc = fcoopmatNV<32, gl_ScopeWorkgroup, BN, BM>(0.0);
    const uint a0 = pc.whBase + n0 * stride, b0 = (pc.mBase + m0) * stride, al0 = pc.wLoBase + n0 * stride;
#ifdef TENSOR
    for (uint k = kBegin / 8; k < kEnd / 8; k += STEP) {
        fcoopmatNV<16, gl_ScopeWorkgroup, BN, BK> a;
        fcoopmatNV<16, gl_ScopeWorkgroup, BK, BM> b;
        coopMatLoadNV(a, wh, a0 + k, stride, false);
        // B = X^T is K x M; X's rows are its columns, so column-major.
        coopMatLoadNV(b, xh, b0 + k, stride, true);
        acc = coopMatMulAddNV(a, b, acc);
        if (EXACT != 0) {
            fcoopmatNV<16, gl_ScopeWorkgroup, BK, BM> bl;
            coopMatLoadNV(bl, xh, pc.loBase + b0 + k, stride, true);
            acc = coopMatMulAddNV(a, bl, acc);
        }
        if (WLO != 0) {
            fcoopmatNV<16, gl_ScopeWorkgroup, BN, BK> al;
            coopMatLoadNV(al, wh, al0 + k, stride, false);
            acc = coopMatMulAddNV(al, b, acc);
        }
    }
#else
    for (uint k = kBegin / 8; k < kEnd / 8; k += STEP) {
        // The step's tiles into shared memory, 16 bytes a load, a row's
        // STEP loads by neighbouring invocations.
        for (uint i = tid; i < BN * STEP; i += lanes) {
            const uint r = i / STEP, c = i % STEP;
            sa[r * ROW + c] = wh[a0 + r * stride + k + c];
            if (WLO != 0) {
                sal[r * ROW + c] = wh[al0 + r * stride + k + c];
            }
        }
        for (uint i = tid; i < BM * STEP; i += lanes) {
            const uint r = i / STEP, c = i % STEP;
            sb[r * ROW + c] = xh[b0 + r * stride + k + c];
            if (EXACT != 0) {
                sbl[r * ROW + c] = xh[pc.loBase + b0 + r * stride + k + c];
            }
        }
        barrier();
        fcoopmatNV<16, gl_ScopeWorkgroup, BN, BK> a;
        fcoopmatNV<16, gl_ScopeWorkgroup, BK, BM> b;
        coopMatLoadNV(a, sa, 0, ROW, false);
        // B = X^T is K x M; X's rows are its columns, so column-major.
        coopMatLoadNV(b, sb, 0, ROW, true);
        acc = coopMatMulAddNV(a, b, acc);
        if (EXACT != 0) {
            fcoopmatNV<16, gl_ScopeWorkgroup, BK, BM> bl;
            coopMatLoadNV(bl, sbl, 0, ROW, true);
            acc = coopMatMulAddNV(a, bl, acc);
        }
        if (WLO != 0) {
            fcoopmatNV<16, gl_ScopeWorkgroup, BN, BK> al;
            coopMatLoadNV(al, sal, 0, ROW, false);
            acc = coopMatMulAddNV(al, b, acc);
        }
        barrier();
    }
#endif
    // acc[n][m] is Y[m][n]: column-major along Y's rows.
    coopMatStoreNV(acc, y, yOff + m0 * pc.N + n0, pc.N, true);
}
