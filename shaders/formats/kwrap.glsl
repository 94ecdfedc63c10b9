// The format interface of a K-quant, from its kDecode(n, k, count, v),
// which decodes count weights from (n, k) within one scale's sub-block.
float weightAt(uint n, uint k) {
    float v[8];
    kDecode(n, k, 1, v);
    return v[0];
}

void weights8(uint n, uint k, out float v[8]) { kDecode(n, k, 8, v); }
