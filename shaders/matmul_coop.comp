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
// gpu/vulkan); blocks of more than 4 accumulators ran slower on the H200.
//
// Accuracy (EXACT, PrecisionExact): X is split into float16 hi + lo
// (x - hi), two products per step, so the result keeps float32's accuracy
// rather than float16's. That is taken only for weights exact in float16
// (1-bit, ternary, F16): splitting W too ran slower than matmul.comp on the
// H200. PrecisionFast rounds X and W to float16, one product per step, for
// any weight format. A tile whose inputs exceed float16's range is
// recomputed in float32.
layout(local_size_x = 256) in;

// The tile shape, chosen per GEMM by the host: each subgroup holds TM x TN
// accumulators, and the 8 subgroups stand WGM along M by 8 / WGM along N.
// BN must be at least 128 (the result staging below uses 8 KiB of Bhi).
layout(constant_id = 0) const uint TM = 1;
layout(constant_id = 1) const uint TN = 4;
layout(constant_id = 2) const uint WGM = 4;
layout(constant_id = 3) const uint BK = 32; // k per step: 32 or 64
layout(constant_id = 4) const uint EXACT = 1; // 0: PrecisionFast
const uint BM = 16 * TM * WGM, BN = 16 * TN * (8 / WGM);


layout(push_constant) uniform Push {
    uint M, N, K;
    uint scaleBase; // first word of the block scales
    uint hasBias;
} pc;

#define W_BINDING 1
#define W_K pc.K
#define W_SCALES pc.scaleBase
#include "formats/select.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

const uint CH = BK / 8; // chunks of 8 halves per tile row
// Shared rows hold BK halves plus 8 of padding, so that the rows a
// cooperative load reads start in different banks; in uvec4s of 8 halves:
const uint SROW = (BK + 8) / 8;

shared uvec4 Ahi[BM * SROW], Alo[BM * SROW];
shared uvec4 Bhi[BN * SROW];
shared uint outOfRange;


float elemA(uint m, uint k) { return m < pc.M && k < pc.K ? x[m * pc.K + k] : 0.0; }

void elemsB(uint n, uint k, out float v[8]) {
    if (n < pc.N && k < pc.K) {
        weights8(n, k, v);
        return;
    }
    [[unroll]] for (uint i = 0; i < 8; i++) {
        v[i] = 0.0;
    }
}

// split packs 8 floats as float16 hi parts and the float16 remainders. hi
// keeps a float's top 11 significant bits by masking, not by a round trip
// through float16, which a compiler may fold to the identity.
void split(float v[8], out uvec4 hi, out uvec4 lo) {
    [[unroll]] for (uint i = 0; i < 4; i++) {
        vec2 a = vec2(v[2 * i], v[2 * i + 1]);
        vec2 h = uintBitsToFloat(floatBitsToUint(a) & 0xFFFFE000u);
        hi[i] = packHalf2x16(h);
        lo[i] = packHalf2x16(a - h);
    }
}

// round packs 8 floats as float16, rounded (PrecisionFast).
uvec4 round16(float v[8]) {
    uvec4 h;
    [[unroll]] for (uint i = 0; i < 4; i++) {
        h[i] = packHalf2x16(vec2(v[2 * i], v[2 * i + 1]));
    }
    return h;
}

bool fitsHalf(float v[8]) {
    bool ok = true;
    [[unroll]] for (uint i = 0; i < 8; i++) {
        ok = ok && abs(v[i]) <= 65504.0; // false for NaN too
    }
    return ok;
}

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void main() {
    uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    uint tid = gl_LocalInvocationIndex, sg = gl_SubgroupID;
    uint wm = 16 * TM * (sg / (8 / WGM)), wn = 16 * TN * (sg % (8 / WGM));
    if (tid == 0) {
        outOfRange = 0;
    }
    ACC acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++) {
        [[unroll]] for (uint j = 0; j < TN; j++) {
            acc[i][j] = ACC(0.0);
        }
    }
    bool ok = true;
    for (uint k0 = 0; k0 < pc.K; k0 += BK) {
        // Tiles in chunks of 8 along k: A's BM rows, then B's BN rows.
        [[unroll]] for (uint h = 0; h < (BM * CH + 255) / 256; h++) {
            uint id = tid + 256 * h, r = id / CH, c = id % CH;
            if (id >= BM * CH) {
                break;
            }
            float v[8];
            [[unroll]] for (uint i = 0; i < 8; i++) {
                v[i] = elemA(m0 + r, k0 + 8 * c + i);
            }
            ok = ok && fitsHalf(v);
            if (EXACT != 0) {
                split(v, Ahi[r * SROW + c], Alo[r * SROW + c]);
            } else {
                Ahi[r * SROW + c] = round16(v);
            }
        }
        [[unroll]] for (uint h = 0; h < BN * CH / 256; h++) {
            uint id = tid + 256 * h, r = id / CH, c = id % CH;
            float v[8];
            elemsB(n0 + r, k0 + 8 * c, v);
            if (EXACT != 0) {
                uvec4 hi, lo; // lo is 0: the weights are exact in float16
                split(v, hi, lo);
                Bhi[r * SROW + c] = hi;
            } else {
                ok = ok && fitsHalf(v);
                Bhi[r * SROW + c] = round16(v);
            }
        }
        barrier();
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
            MAT16 ah[TM], al[TM], bh[TN];
            [[unroll]] for (uint i = 0; i < TM; i++) {
                coopMatLoadNV(ah[i], Ahi, (wm + 16 * i) * SROW + kk / 8, SROW, false);
                if (EXACT != 0) {
                    coopMatLoadNV(al[i], Alo, (wm + 16 * i) * SROW + kk / 8, SROW, false);
                }
            }
            [[unroll]] for (uint j = 0; j < TN; j++) {
                // B = W^T is K x N; W's rows are its columns, so column-major.
                coopMatLoadNV(bh[j], Bhi, (wn + 16 * j) * SROW + kk / 8, SROW, true);
            }
            [[unroll]] for (uint i = 0; i < TM; i++) {
                [[unroll]] for (uint j = 0; j < TN; j++) {
                    acc[i][j] = coopMatMulAddNV(ah[i], bh[j], acc[i][j]);
                    if (EXACT != 0) {
                        acc[i][j] = coopMatMulAddNV(al[i], bh[j], acc[i][j]);
                    }
                }
            }
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
            if (m >= pc.M || n >= pc.N) {
                continue;
            }
            float sum = 0.0;
            for (uint k = 0; k < pc.K; k += 8) {
                float v[8];
                elemsB(n, k, v);
                for (uint i = 0; i < 8; i++) {
                    sum += elemA(m, k + i) * v[i];
                }
            }
            y[m * pc.N + n] = sum + (pc.hasBias != 0 ? bias[n] : 0.0);
        }
        return;
    }
    // Each subgroup stages its 16x16 results through 1 KiB of Bhi, so that
    // edges are clipped and bias added.
    uint lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint i = 0; i < TM; i++) {
        [[unroll]] for (uint j = 0; j < TN; j++) {
            coopMatStoreNV(acc[i][j], Bhi, 64 * sg, 4, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < 256; e += 32) {
                uint m = m0 + wm + 16 * i + e / 16, n = n0 + wn + 16 * j + e % 16;
                if (m < pc.M && n < pc.N) {
                    y[m * pc.N + n] = uintBitsToFloat(Bhi[64 * sg + e / 4][e % 4]) + (pc.hasBias != 0 ? bias[n] : 0.0);
                }
            }
            subgroupBarrier();
        }
    }
}
