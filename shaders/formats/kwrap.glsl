// The format interface of a K-quant, from its kDecode(n, k, count, v),
// which decodes count weights from (n, k) within one scale's sub-block,
// and its kDecode8(n, k, v), the same for 8 weights from k % 8 == 0 (every
// caller of weights8) reading whole words.
float weightAt(uint n, uint k) {
    float v[8];
    kDecode(n, k, 1, v);
    return v[0];
}

void weights8(uint n, uint k, out float v[8]) { kDecode8(n, k, v); }
