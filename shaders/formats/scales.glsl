// Block formats are repacked on upload: every block's quants (whole words)
// first, then every block's f16 scale from word W_SCALES on, two to a word.
layout(std430, binding = W_BINDING) readonly buffer Weights { uint w[]; };

float scaleOf(uint b) { return unpackHalf2x16(w[W_BASE + (W_SCALES + (b >> 1))])[b & 1]; }
