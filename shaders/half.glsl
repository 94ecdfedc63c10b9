// Float32 to float16, as the cooperative GEMM's inputs take it (8 at a
// time, packed in a uvec4). The GEMM and tohalf.comp share these, so a
// converted x gives the GEMM the same bits as converting in the GEMM.

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

// round16 packs 8 floats as float16, rounded (PrecisionFast).
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
