// tile.glsl's gemmTile on cooperative matrices, for scores.comp and mix.comp
// (the attention a hook on the scores or the pattern takes). Each step's
// A and B tiles are staged in float16 (EXACT: hi + lo halves, three
// products, as in matmul_coop.comp; else rounded, one product); the 8
// subgroups of 32 lanes each hold a 16 x 32 block of the 64 x 64 tile in
// float32 accumulators, which go through shared memory to each invocation's
// 4 x 4 block. The including kernel defines tileA, tileB8 (as for
// tile.glsl) and TILE_A_SCALE, a power of two A is multiplied by before the
// products and the sums divided by after: mix.comp's probabilities, so that
// those down to 2^-24 stay float16 normals. (float16's subnormals keep
// small inputs to about 2^-25 absolute: coarser than hi + lo's 2^-22
// relative below 2^-3 at exact precision, than 2^-11 below 2^-14 at fast.)
// A workgroup that meets a value float16 cannot hold (after the scale: a
// probability over 63.97, which only a hook can put there) computes its
// tile in float32, slowly.
layout(constant_id = 0) const uint EXACT = 1; // 0: PrecisionFast

#define BM 64
#define BN 64
#define BK 32
const uint SROW = (BK + 8) / 8; // uvec4s of a staged row: BK halves and 8 of padding
const uint A_HI = 0, A_LO = BM * SROW, B_HI = 2 * BM * SROW, B_LO = B_HI + BN * SROW;
// The staged tiles; after the last step, the 64 x 64 sums (16 uvec4s a row).
shared uvec4 staged[2 * (BM + BN) * SROW];
shared uint outOfRange;

#include "half.glsl"

#define MAT16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

uint tileRow(uint i) { return 4 * (gl_LocalInvocationIndex / 16) + i; }
uint tileCol(uint j) { return 4 * (gl_LocalInvocationIndex % 16) + j; }

// stage8 stores 8 values as float16 at row, chunk c of the tile at base;
// it reports whether float16 holds them.
bool stage8(float v[8], uint base, uint lo, uint row, uint c) {
    uint at = base + row * SROW + c;
    if (EXACT != 0) {
        split(v, staged[at], staged[lo + row * SROW + c]);
    } else {
        staged[at] = round16(v);
    }
    return fitsHalf(v);
}

// fetch reads the chunks of 8 this invocation stages at step k0.
void fetch(uint m0, uint n0, uint k0, out float a[8], out float b[8]) {
    uint r = gl_LocalInvocationIndex / 4, c = gl_LocalInvocationIndex % 4;
    [[unroll]] for (uint i = 0; i < 8; i++) {
        a[i] = TILE_A_SCALE * tileA(m0 + r, k0 + 8 * c + i);
    }
    tileB8(n0 + r, k0 + 8 * c, b);
}

// gemmTile adds sum_{k < kEnd} A[m0+tileRow(i)][k] B[n0+tileCol(j)][k] into
// acc[i][j]. kEnd must be the same for the whole workgroup.
void gemmTile(uint m0, uint n0, uint kEnd, inout vec4 acc[4]) {
    uint tid = gl_LocalInvocationIndex, sg = gl_SubgroupID;
    uint wm = 16 * (sg / 2), wn = 32 * (sg % 2); // this subgroup's block
    uint r = tid / 4, c = tid % 4;               // the chunk of 8 it stages
    if (tid == 0) {
        outOfRange = 0;
    }
    ACC s0 = ACC(0.0), s1 = ACC(0.0);
    // Each step's chunks are read while the step before multiplies.
    float a[8], b[8];
    fetch(m0, n0, 0, a, b);
    bool ok = true;
    for (uint k0 = 0; k0 < kEnd; k0 += BK) {
        barrier(); // the step before is multiplied (first: outOfRange is 0)
        ok = stage8(a, A_HI, A_LO, r, c) && ok;
        ok = stage8(b, B_HI, B_LO, r, c) && ok;
        barrier();
        if (k0 + BK < kEnd) {
            fetch(m0, n0, k0 + BK, a, b);
        }
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
            MAT16 ah, b0, b1;
            // B's rows are its columns here: column-major.
            coopMatLoadNV(ah, staged, A_HI + wm * SROW + kk / 8, SROW, false);
            coopMatLoadNV(b0, staged, B_HI + wn * SROW + kk / 8, SROW, true);
            coopMatLoadNV(b1, staged, B_HI + (wn + 16) * SROW + kk / 8, SROW, true);
            s0 = coopMatMulAddNV(ah, b0, s0);
            s1 = coopMatMulAddNV(ah, b1, s1);
            if (EXACT != 0) {
                MAT16 al, l0, l1;
                coopMatLoadNV(al, staged, A_LO + wm * SROW + kk / 8, SROW, false);
                coopMatLoadNV(l0, staged, B_LO + wn * SROW + kk / 8, SROW, true);
                coopMatLoadNV(l1, staged, B_LO + (wn + 16) * SROW + kk / 8, SROW, true);
                s0 = coopMatMulAddNV(al, b0, s0);
                s1 = coopMatMulAddNV(al, b1, s1);
                s0 = coopMatMulAddNV(ah, l0, s0);
                s1 = coopMatMulAddNV(ah, l1, s1);
            }
        }
    }
    if (!ok) {
        atomicOr(outOfRange, 1u);
    }
    barrier(); // the last step is multiplied, and outOfRange final
    if (outOfRange != 0) {
        // Rare: each invocation sums its 4 x 4 outputs in float32.
        for (uint i = 0; i < 4; i++) {
            for (uint j = 0; j < 4; j++) {
                float sum = 0.0;
                for (uint k = 0; k < kEnd; k += 8) {
                    float b[8];
                    tileB8(n0 + tileCol(j), k, b);
                    for (uint e = 0; e < 8; e++) {
                        sum += tileA(m0 + tileRow(i), k + e) * b[e];
                    }
                }
                acc[i][j] += sum;
            }
        }
        return;
    }
    coopMatStoreNV(s0, staged, wm * 16 + wn / 4, 16, false);
    coopMatStoreNV(s1, staged, wm * 16 + (wn + 16) / 4, 16, false);
    barrier();
    for (uint i = 0; i < 4; i++) {
        acc[i] += uintBitsToFloat(staged[tileRow(i) * 16 + gl_LocalInvocationIndex % 16]) / TILE_A_SCALE;
    }
}
