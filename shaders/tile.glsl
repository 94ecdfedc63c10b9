// A 64x64 output tile of C = A B^T per workgroup of 256 invocations, each
// accumulating a 4x4 block, rows tileRow(i) and columns tileCol(j). Shared
// tiles hold vec4s so each step reads two vectors for 16 multiply-adds.
// The including kernel defines
//   float tileA(uint m, uint k)                 (0 outside A)
//   void tileB8(uint n, uint k, out float v[8]) (B[n][k..k+7], 0 outside B)
// Tuned variants (cooperative matrix) replace this file per kernel.
#define BM 64
#define BN 64
#define BK 32

shared vec4 As[BK][BM / 4];
shared vec4 Bs[BK][BN / 4];

uint tileRow(uint i) { return 4 * (gl_LocalInvocationIndex / 16) + i; }
uint tileCol(uint j) { return 4 * (gl_LocalInvocationIndex % 16) + j; }

// gemmTile adds sum_{k < kEnd} A[m0+tileRow(i)][k] B[n0+tileCol(j)][k] into
// acc[i][j]. kEnd must be the same for the whole workgroup.
void gemmTile(uint m0, uint n0, uint kEnd, inout vec4 acc[4]) {
    uint tid = gl_LocalInvocationIndex, tx = tid % 16, ty = tid / 16;
    uint r = tid / 4, kk = (tid % 4) * 8;
    for (uint k0 = 0; k0 < kEnd; k0 += BK) {
        for (uint i = 0; i < 8; i++) {
            As[kk + i][r / 4][r % 4] = tileA(m0 + r, k0 + kk + i);
        }
        float v[8];
        tileB8(n0 + r, k0 + kk, v);
        for (uint i = 0; i < 8; i++) {
            Bs[kk + i][r / 4][r % 4] = v[i];
        }
        barrier();
        for (uint k = 0; k < BK; k++) {
            vec4 a = As[k][ty], b = Bs[k][tx];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        barrier();
    }
}
