// Picks the weight format named by the variant's define. Every format reads
// its words from W_BASE on: where a weight starts in its binding, which a
// mixture's experts share (matmul_coop.comp and matmul.comp with GROUPED).
#ifndef W_BASE
#define W_BASE 0u
#endif
#if defined(FMT_F32)
#include "f32.glsl"
#elif defined(FMT_F16)
#include "f16.glsl"
#elif defined(FMT_BF16)
#include "bf16.glsl"
#elif defined(FMT_Q8_0)
#include "q8_0.glsl"
#elif defined(FMT_Q4_0)
#include "q4_0.glsl"
#elif defined(FMT_Q1_0)
#include "q1_0.glsl"
#elif defined(FMT_TQ2_0)
#include "tq2_0.glsl"
#elif defined(FMT_CODES4)
#include "codes4.glsl"
#elif defined(FMT_Q5_K)
#include "q5_k.glsl"
#elif defined(FMT_Q6_K)
#include "q6_k.glsl"
#else
#error "no weight format defined"
#endif
