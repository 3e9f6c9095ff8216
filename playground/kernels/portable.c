/* Batch-invariant bf16 kernels in portable C: every CPU with a C compiler (aarch64, x86-64 without AVX512-BF16).
 *
 * The same promise as avx512.c, by the same construction: every output element is computed by one fixed
 * sequence of operations that depends only on its own inputs, so a position's logits are bitwise the same
 * whatever pass it sits in. Here the sequence is written in plain C over small lane arrays: the compiler may
 * vectorise the lanes (they are independent), but it never reorders a sum (no -ffast-math, -ffp-contract=off),
 * so the bits do not depend on how it vectorised.
 *
 * This file is the base of every variant: avx2.c and avx512.c include it and replace only what they make faster,
 * each guarded by a macro the variant defines before the include (BI_OWN_LINEARS: the bf16, int8 and int4 linears;
 * BI_OWN_LINEAR_REF: bi_linear_ref, where the variant's linear has another order; BI_OWN_ATTENTION: both
 * attentions; BI_OWN_QUANTIZE: bi_quantize_rows; BI_OWN_EXP, BI_OWN_SILU; BI_OWN_READ_SUM). What a variant does not
 * replace (the norms, rotary, SiLU where it keeps this one) is this file's code, the same definition everywhere.
 *
 * bf16 values travel as uint16_t; accumulation is fp32; rounding to bf16 is round-to-nearest-even.
 * MADD is a fused multiply-add where the CPU has one (aarch64, x86-64 with FMA), else a multiply and an add;
 * for the linears, whose products are of two bf16 values and so exact in fp32, the two give the same bits.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#if defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

#define LANES 8  /* a linear's accumulators per output element */
#define CHUNK 16 /* inputs per step: lane i takes k = 2i + 1, then 2i, of each chunk */

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t to_bf16(float f) { /* round to nearest even; a NaN stays a (quiet) NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* The fixed horizontal sum of a linear's 8 lanes: (i, i + 4), then (i, i + 2), then (0, 1). */
static inline float reduce8(const float *a) {
  float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

/* One output element's epilogue: the lanes' sum (+ bias), rounded; + the residual, rounded again. */
static inline uint16_t finish(const float *acc, const uint16_t *bias, const uint16_t *resid) {
  float y = reduce8(acc);
  if (bias) y += from_bf16(*bias);
  uint16_t r = to_bf16(y);
  if (resid) r = to_bf16(from_bf16(r) + from_bf16(*resid));
  return r;
}

/* Lanes as GCC vector types (SSE, NEON or AVX registers, or pairs of them): the lanes are written out, never left
 * to the auto-vectoriser (GCC 12's -O3 loop vectoriser got chunk() wrong when it was written as scalar loops). */
typedef float f32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

/* One chunk of 16 inputs: as 8 pairs of bf16, AND 0xFFFF0000 gives the odd elements as fp32, a shift left by 16
 * the even ones; lane i adds x[2i + 1] w[2i + 1], then x[2i] w[2i] (products of two bf16 are exact in fp32, so
 * a multiply and an add give the bits of a fused multiply-add: the AVX2 code's). */
static inline f32x8 chunk(f32x8 acc, const uint16_t *x, const uint16_t *w) {
  const u32x8 hi = {0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                    0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u};
  u32x8 xv, wv;
  memcpy(&xv, x, sizeof xv);
  memcpy(&wv, w, sizeof wv);
  acc = acc + (f32x8)(xv & hi) * (f32x8)(wv & hi);
  return acc + (f32x8)(xv << 16) * (f32x8)(wv << 16);
}

/* One element's lanes: the full chunks, then the last one padded with zeros (0 * 0 added to a lane). */
static inline void dot(float *lanes, const uint16_t *x, const uint16_t *w, int64_t K) {
  f32x8 acc = {0};
  int64_t full = K - K % CHUNK;
  for (int64_t k = 0; k < full; k += CHUNK) acc = chunk(acc, x + k, w + k);
  if (full < K) {
    uint16_t xt[CHUNK] = {0}, wt[CHUNK] = {0};
    memcpy(xt, x + full, (size_t)(K - full) * 2);
    memcpy(wt, w + full, (size_t)(K - full) * 2);
    acc = chunk(acc, xt, wt);
  }
  memcpy(lanes, &acc, sizeof acc);
}

#ifndef BI_OWN_LINEAR_REF
/* The definition, one element at a time (tests compare bi_linear with it, bitwise). */
void bi_linear_ref(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                   const uint16_t *resid, uint16_t *out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++) {
      float acc[LANES];
      dot(acc, x + m * K, w + n * K, K);
      out[m * N + n] = finish(acc, bias ? bias + n : NULL, resid ? resid + m * N + n : NULL);
    }
}
#endif

#ifndef BI_OWN_LINEARS
/* x: (M, K), w: (N, K), bias: (N,) or NULL, resid: (M, N) or NULL, out: (M, N), bf16, contiguous. Blocks of 4
 * weight rows, each read once for all the rows of the pass (from cache after the first); every element by dot(). */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
  int64_t nblocks = (N + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblocks; b++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 4 * b; n < N && n < 4 * b + 4; n++) {
        float acc[LANES];
        dot(acc, x + m * K, w + n * K, K);
        out[m * N + n] = finish(acc, bias ? bias + n : NULL, resid ? resid + m * N + n : NULL);
      }
}
#endif

/* ------------------------------------------------------------------------------------------------
 * int8 weights for a draft: W (N, K) int8 with a scale per row, x quantised per row to uint8 (zero point 128)
 * at each call. The integer sum is exact whatever its order, so any blocking is batch-invariant;
 * y = sx * sw[n] * (acc - 128 rowsum[n]) + bias[n], the same float operations for every element.
 */

#ifndef BI_OWN_QUANTIZE
/* x: (M, K) bf16 -> xq: (M, Kp) uint8 (K padded with the zero point to Kp), sx: (M,). */
void bi_quantize_rows(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, uint8_t *xq, float *sx) {
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *row = x + m * K;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; k++) { /* not fmaxf: GCC 12's aarch64 vectoriser crashes on that reduction (ICE) */
      float a = fabsf(from_bf16(row[k]));
      if (a > amax) amax = a; /* the same value as fmaxf(amax, a), a NaN included (passed over) */
    }
    float s = amax > 0 ? amax / 127.0f : 1.0f, inv = 1.0f / s;
    sx[m] = s;
    for (int64_t k = 0; k < Kp; k++) {
      float v = k < K ? nearbyintf(from_bf16(row[k]) * inv) + 128.0f : 128.0f;
      xq[m * Kp + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}
#else
void bi_quantize_rows(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, uint8_t *xq, float *sx);
#endif

/* One element from its centred integer sum (acc - 128 rowsum[n]). */
static inline uint16_t finish_i8(int32_t centred, float sx, float sw, const uint16_t *bias, const uint16_t *resid) {
  float y = (sx * sw) * (float)centred;
  if (bias) y += from_bf16(*bias);
  uint16_t r = to_bf16(y);
  if (resid) r = to_bf16(from_bf16(r) + from_bf16(*resid));
  return r;
}

#ifndef BI_OWN_LINEARS
void bi_linear_i8(const uint16_t *x, int64_t M, int64_t K, const int8_t *w, int64_t N, const float *sw,
                  const int32_t *rowsum, const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  int64_t Kp = (K + 63) & ~(int64_t)63;
  uint8_t *xq = (uint8_t *)malloc((size_t)(M * Kp));
  float *sx = (float *)malloc(sizeof(float) * (size_t)M);
  bi_quantize_rows(x, M, K, Kp, xq, sx);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++) {
      int32_t acc = 0;
      const uint8_t *q = xq + m * Kp;
      const int8_t *wr = w + n * K;
      for (int64_t k = 0; k < K; k++) acc += (int32_t)q[k] * (int32_t)wr[k];
      out[m * N + n] = finish_i8(acc - 128 * rowsum[n], sx[m], sw[n], bias ? bias + n : NULL,
                                 resid ? resid + m * N + n : NULL);
    }
  free(xq);
  free(sx);
}
#endif

/* ------------------------------------------------------------------------------------------------
 * int4 weights for a draft, groups of G along K (G a multiple of 32 that divides K). A weight row is Kp / 2 bytes
 * (Kp = K rounded up to 128, padded with the zero point): per chunk of 128 k, byte j holds k0 + j in its low nibble
 * and k0 + 64 + j in its high one, each w + 8 (0..15). A bf16 scale per (row, group), rows of ceil(Kp / G) (zeros
 * past K). x is quantised per row to int8 at each call (bi_quantize_rows, less the zero point 128).
 * Per output element, 8 fp32 lanes; per 32 k in increasing order (one group or part of one), lane l takes the exact
 * integer sum of its 4 products (w - 8) x (|sum| <= 4064) times the group's scale (exact in fp32: a multiply and an
 * add give a fused multiply-add's bits), then reduce8, y = sx * sum (+ bias), rounded (+ resid, rounded). Integer
 * sums are exact in any order and the float part has one order, so every blocking is batch-invariant.
 */
typedef int32_t i32x8 __attribute__((vector_size(32)));

/* x: (M, K) bf16 -> xs: (M, Kp) int8 (zeros past K), nc: (M, Kp / 4), -8 times the sum of each 4 x, sx: (M,). */
static inline void quantize_rows_i4(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, int8_t *xs, int32_t *nc, float *sx) {
  uint8_t *u = (uint8_t *)xs;
  bi_quantize_rows(x, M, K, Kp, u, sx);
  for (int64_t i = 0; i < M * Kp; i++) xs[i] = (int8_t)((int)u[i] - 128);
  for (int64_t i = 0; i < M * Kp / 4; i++)
    nc[i] = -8 * ((int32_t)xs[4 * i] + xs[4 * i + 1] + xs[4 * i + 2] + xs[4 * i + 3]);
}

/* The scale of the 32 k from k (a bf16 as fp32). */
static inline float scale_i4(const uint16_t *s, int64_t k, int64_t G) { return from_bf16(s[k / G]); }

/* One element's epilogue: sx times the lanes' sum (+ bias), rounded; + the residual, rounded again. */
static inline uint16_t finish_i4(const float *lanes, float sx, const uint16_t *bias, const uint16_t *resid) {
  float y = sx * reduce8(lanes);
  if (bias) y += from_bf16(*bias);
  uint16_t r = to_bf16(y);
  if (resid) r = to_bf16(from_bf16(r) + from_bf16(*resid));
  return r;
}

#ifndef BI_OWN_LINEARS
/* The 8 lanes' integer sums of 32 k: the nibbles of bytes wb[0..31] (shift 0: low, 4: high) against x[0..31]. */
static inline i32x8 dot_i4(const uint8_t *wb, int shift, const int8_t *x, const int32_t *nc) {
  i32x8 sum;
  memcpy(&sum, nc, sizeof sum);
  for (int u = 0; u < 4; u++) {
    i32x8 wv, xv;
    for (int l = 0; l < 8; l++) {
      wv[l] = (wb[4 * l + u] >> shift) & 15;
      xv[l] = x[4 * l + u];
    }
    sum += wv * xv;
  }
  return sum;
}

/* x (M, K) bf16; w (N, Kp / 2) uint8; s (N, ceil(Kp / G)) bf16; bias (N,) or NULL; resid (M, N) or NULL; out (M, N). */
void bi_linear_i4(const uint16_t *x, int64_t M, int64_t K, const uint8_t *w, int64_t N, const uint16_t *s, int64_t G,
                  const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  int64_t Kp = (K + 127) & ~(int64_t)127, S = (Kp + G - 1) / G;
  int8_t *xs = (int8_t *)malloc((size_t)(M * Kp));
  int32_t *nc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(M * Kp / 4));
  float *sx = (float *)malloc(sizeof(float) * (size_t)M);
  quantize_rows_i4(x, M, K, Kp, xs, nc, sx);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++) {
      f32x8 acc = {0};
      const uint8_t *wr = w + n * (Kp / 2);
      for (int64_t k0 = 0; k0 < Kp; k0 += 128)
        for (int t = 0; t < 4; t++) {
          int64_t k = k0 + 32 * t;
          i32x8 sum = dot_i4(wr + k0 / 2 + 32 * (t & 1), 4 * (t >> 1), xs + m * Kp + k, nc + (m * Kp + k) / 4);
          float sc = scale_i4(s + n * S, k, G);
          f32x8 scv = {sc, sc, sc, sc, sc, sc, sc, sc};
          acc = acc + __builtin_convertvector(sum, f32x8) * scv;
        }
      float lanes[LANES];
      memcpy(lanes, &acc, sizeof acc);
      out[m * N + n] = finish_i4(lanes, sx[m], bias ? bias + n : NULL, resid ? resid + m * N + n : NULL);
    }
  free(xs);
  free(nc);
  free(sx);
}
#endif

#ifndef BI_OWN_READ_SUM
/* Read bandwidth: sum a buffer of n floats with every thread, reps times. */
double read_sum(const float *buf, int64_t n, int reps) {
  double total = 0;
  for (int r = 0; r < reps; r++) {
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n; i += 64) {
      float a[16] = {0};
      int64_t end = i + 64 < n ? i + 64 : n;
      for (int64_t j = i; j + 16 <= end; j += 16)
        for (int l = 0; l < 16; l++) a[l] += buf[j + l];
      float s = 0;
      for (int l = 0; l < 16; l++) s += a[l];
      total += s;
    }
  }
  return total;
}
#endif

/* ------------------------------------------------------------------------------------------------
 * Attention, one query at a time, over the keys it may see, listed in increasing order (the mask's allowed
 * entries, or 0 .. T - Q + i when there is no mask): scores, softmax and the weighted sum of values over that
 * list alone, in that order. A masked key is skipped, not added as a zero, so a query's result depends only on
 * its own keys.
 */

/* exp(x), x clamped to [-87, 88]: Cody-Waite range reduction and a degree-6 polynomial. */
static inline float exp_clamped(float x) {
  x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
  float n = nearbyintf(x * 1.44269504088896341f);
  float r = MADD(-n, 0.693359375f, x);
  r = MADD(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = MADD(p, r, 1.3981999507e-3f);
  p = MADD(p, r, 8.3334519073e-3f);
  p = MADD(p, r, 4.1665795894e-2f);
  p = MADD(p, r, 1.6666665459e-1f);
  p = MADD(p, r, 5.0000001201e-1f);
  p = MADD(p, r * r, r + 1.0f);
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
  float scale;
  memcpy(&scale, &bits, 4);
  return p * scale;
}

typedef uint16_t u16x8 __attribute__((vector_size(16)));

static inline f32x8 widen8(const uint16_t *p) { /* 8 bf16 -> 8 fp32, exactly */
  u16x8 h;
  memcpy(&h, p, sizeof h);
  return (f32x8)(__builtin_convertvector(h, u32x8) << 16);
}

#ifndef BI_OWN_ATTENTION
#ifndef BI_OWN_EXP
/* s[j] = exp_clamped(s[j] - mx) for j < n (avx2.c: 8 at a time, by the same operations lane-wise). */
static void exp_shifted(float *s, int64_t n, float mx) {
  for (int64_t j = 0; j < n; j++) s[j] = exp_clamped(s[j] - mx);
}
#endif

#ifndef EXACT_MADD8 /* acc + a * b, a * b exact (two bf16): avx2.c makes it one fused multiply-add, the same bits */
#define EXACT_MADD8(acc, a, b) ((acc) + (a) * (b))
#endif

/* 16 bf16 as 8 pairs: the odd elements and the even ones, as fp32 (AND 0xFFFF0000, shift left by 16: exact). */
static inline void split16(const uint16_t *p, f32x8 *odd, f32x8 *even) {
  const u32x8 hi = {0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                    0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u};
  u32x8 v;
  memcpy(&v, p, sizeof v);
  *odd = (f32x8)(v & hi);
  *even = (f32x8)(v << 16);
}

/* The fixed tree of a score's 8 lanes: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
static inline float tree8(f32x8 s) {
  float a[8];
  memcpy(a, &s, sizeof a);
  float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
  return (b0 + b2) + (b1 + b3);
}

/* q . k over D (a multiple of 16): per chunk of 16, the odd elements' products into a0, the even ones' into a1
 * (products of two bf16: exact), in order over d; then a0 + a1 and tree8. */
static inline float qk(const uint16_t *q, const uint16_t *k, int64_t D) {
  f32x8 a0 = {0}, a1 = {0};
  for (int64_t d = 0; d < D; d += 16) {
    f32x8 qo, qe, ko, ke;
    split16(q + d, &qo, &qe);
    split16(k + d, &ko, &ke);
    a0 = a0 + qo * ko;
    a1 = a1 + qe * ke;
  }
  return tree8(a0 + a1);
}

/* The keys query i of batch row b sees, in increasing order: the mask's allowed entries, or 0 .. T - Q + i. */
static int64_t key_list(const uint8_t *allowed, const int64_t *sm, int64_t b, int64_t i, int64_t Q, int64_t T,
                        int32_t *keys) {
  int64_t n = 0;
  if (allowed) {
    const uint8_t *row = allowed + b * sm[0] + i * sm[1];
    for (int64_t j = 0; j < T; j++)
      if (row[j * sm[2]]) keys[n++] = (int32_t)j;
  } else {
    for (int64_t j = 0; j <= T - Q + i; j++) keys[n++] = (int32_t)j;
  }
  return n;
}

/* The definition, one query at a time: scores (qk, times scale), their max, exp(s - max), the normaliser l summed
 * in key order, and per d the weighted sum of values in key order (a multiply, then an add), times 1 / l. */
static void attend_one(const uint16_t *qv, const uint16_t *kb, int64_t skt, const uint16_t *vb, int64_t svt,
                       const int32_t *keys, int64_t n, int64_t D, float scale, float *scores, float *ov, uint16_t *o) {
  if (n == 0) {
    memset(o, 0, (size_t)D * sizeof(uint16_t));
    return;
  }
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    scores[j] = qk(qv, kb + keys[j] * skt, D) * scale;
    if (scores[j] > mx) mx = scores[j];
  }
  for (int64_t j = 0; j < n; j++) scores[j] = exp_clamped(scores[j] - mx);
  for (int64_t d = 0; d < D; d++) ov[d] = 0.0f;
  float l = 0.0f;
  for (int64_t j = 0; j < n; j++) {
    float p = scores[j];
    const uint16_t *vr = vb + keys[j] * svt;
    l += p;
    for (int64_t d = 0; d < D; d++) ov[d] = ov[d] + p * from_bf16(vr[d]);
  }
  float inv = 1.0f / l;
  for (int64_t d = 0; d < D; d++) o[d] = to_bf16(ov[d] * inv);
}

void bi_attention_ref(const uint16_t *q, const int64_t *sq, const uint16_t *k, const int64_t *sk, const uint16_t *v,
                      const int64_t *sv, const uint8_t *allowed, const int64_t *sm, uint16_t *out, int64_t B, int64_t H,
                      int64_t Hkv, int64_t Q, int64_t T, int64_t D, float scale, float *scratch) {
  (void)scratch;
  int64_t groups = H / Hkv, tasks = B * H * Q;
#pragma omp parallel
  {
    float *scores = (float *)malloc(sizeof(float) * (size_t)(T > 0 ? T : 1));
    int32_t *keys = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T > 0 ? T : 1));
    float ov[256];
#pragma omp for schedule(dynamic, 16)
    for (int64_t task = 0; task < tasks; task++) {
      int64_t b = task / (H * Q), h = (task / Q) % H, i = task % Q, hk = h / groups;
      int64_t n = key_list(allowed, sm, b, i, Q, T, keys);
      attend_one(q + b * sq[0] + h * sq[1] + i * sq[2], k + b * sk[0] + hk * sk[1], sk[2], v + b * sv[0] + hk * sv[1],
                 sv[2], keys, n, D, scale, scores, ov, out + ((b * Q + i) * H + h) * D);
    }
    free(scores);
    free(keys);
  }
}

/* v[t] -> lane t = tree8(v[t]), for 8 at once (the same pairs, in the same order). */
static inline f32x8 reduce8x8(const f32x8 *v) {
  const u32x8 lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
  const u32x8 lo2 = {0, 1, 4, 5, 8, 9, 12, 13}, hi2 = {2, 3, 6, 7, 10, 11, 14, 15};
  const u32x8 ev = {0, 2, 4, 6, 8, 10, 12, 14}, od = {1, 3, 5, 7, 9, 11, 13, 15};
  f32x8 p[4], u[2];
  for (int t = 0; t < 4; t++) /* [b0..b3 of v[2t], b0..b3 of v[2t + 1]], b_i = l_i + l_{i+4} */
    p[t] = __builtin_shuffle(v[2 * t], v[2 * t + 1], lo4) + __builtin_shuffle(v[2 * t], v[2 * t + 1], hi4);
  for (int t = 0; t < 2; t++) /* [b0 + b2, b1 + b3] of four keys */
    u[t] = __builtin_shuffle(p[2 * t], p[2 * t + 1], lo2) + __builtin_shuffle(p[2 * t], p[2 * t + 1], hi2);
  return __builtin_shuffle(u[0], u[1], ev) + __builtin_shuffle(u[0], u[1], od);
}

/* bi_attention_ref's bits, faster: one task is a position and a key/value head, so the key list is made once for
 * the heads of the group; the query is split once; the scores of 8 keys are reduced at once (reduce8x8, the same
 * tree); the weighted sums keep 4 chunks of 16 d in registers over all the keys (the same multiply and add per
 * element, in key order). */
void bi_attention(const uint16_t *q, const int64_t *sq, const uint16_t *k, const int64_t *sk, const uint16_t *v,
                  const int64_t *sv, const uint8_t *allowed, const int64_t *sm, uint16_t *out, int64_t B, int64_t H,
                  int64_t Hkv, int64_t Q, int64_t T, int64_t D, float scale) {
  int64_t G = H / Hkv, tasks = B * Hkv * Q;
#pragma omp parallel
  {
    float *scores = (float *)malloc(sizeof(float) * (size_t)(T + 8));
    int32_t *keys = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T > 0 ? T : 1));
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < tasks; task++) {
      int64_t b = task / (Hkv * Q), hk = (task / Q) % Hkv, i = task % Q;
      int64_t n = key_list(allowed, sm, b, i, Q, T, keys);
      const uint16_t *kb = k + b * sk[0] + hk * sk[1], *vb = v + b * sv[0] + hk * sv[1];
      for (int64_t g = 0; g < G; g++) {
        int64_t h = hk * G + g;
        const uint16_t *qv = q + b * sq[0] + h * sq[1] + i * sq[2];
        uint16_t *o = out + ((b * Q + i) * H + h) * D;
        if (n == 0) {
          memset(o, 0, (size_t)D * sizeof(uint16_t));
          continue;
        }
        f32x8 qo[16], qe[16]; /* the query split once (D <= 256) */
        for (int64_t c = 0; c < D / 16; c++) split16(qv + 16 * c, &qo[c], &qe[c]);
        float mx = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += 8) {
          f32x8 sums[8];
          for (int t = 0; t < 8; t++) { /* past the end: the last key again, its score discarded */
            const uint16_t *kr = kb + keys[j0 + t < n ? j0 + t : n - 1] * sk[2];
            f32x8 a0 = {0}, a1 = {0};
            for (int64_t c = 0; c < D / 16; c++) {
              f32x8 ko, ke;
              split16(kr + 16 * c, &ko, &ke);
              a0 = EXACT_MADD8(a0, qo[c], ko);
              a1 = EXACT_MADD8(a1, qe[c], ke);
            }
            sums[t] = a0 + a1;
          }
          f32x8 sc = reduce8x8(sums) * scale;
          memcpy(scores + j0, &sc, sizeof sc);
          for (int64_t t = j0; t < j0 + 8 && t < n; t++)
            if (scores[t] > mx) mx = scores[t];
        }
        exp_shifted(scores, n, mx);
        float l = 0.0f;
        for (int64_t j = 0; j < n; j++) l += scores[j];
        float inv = 1.0f / l;
        for (int64_t d0 = 0; d0 < D; d0 += 64) { /* 4 chunks of 16 values at a time, odd and even, in registers */
          int64_t nc = (D - d0) / 16 < 4 ? (D - d0) / 16 : 4;
          f32x8 ao[4] = {{0}}, ae[4] = {{0}};
          for (int64_t j = 0; j < n; j++) {
            const uint16_t *vr = vb + keys[j] * sv[2] + d0;
            f32x8 p = {0};
            p = p + scores[j];
            for (int c = 0; c < 4; c++)
              if (c < nc) {
                f32x8 vo, ve;
                split16(vr + 16 * c, &vo, &ve);
                ao[c] = ao[c] + p * vo;
                ae[c] = ae[c] + p * ve;
              }
          }
          for (int c = 0; c < nc; c++) {
            float odd[8], even[8];
            f32x8 yo = ao[c] * inv, ye = ae[c] * inv;
            memcpy(odd, &yo, sizeof odd);
            memcpy(even, &ye, sizeof even);
            for (int t = 0; t < 8; t++) {
              o[d0 + 16 * c + 2 * t] = to_bf16(even[t]);
              o[d0 + 16 * c + 2 * t + 1] = to_bf16(odd[t]);
            }
          }
        }
      }
    }
    free(scores);
    free(keys);
  }
}
#endif /* BI_OWN_ATTENTION */

/* ------------------------------------------------------------------------------------------------
 * RMSNorm (Llama / Qwen2 / Mistral): h * rsqrt(mean(h^2) + eps) rounded to bf16, times the weight, rounded.
 * The sum of squares in 16 lanes over the row, then the fixed tree: a row never depends on the other rows.
 */
void bi_rmsnorm(const uint16_t *x, int64_t M, int64_t D, const uint16_t *w, float eps, uint16_t *out) {
#pragma omp parallel for schedule(static) if (M > 4)
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *row = x + m * D;
    f32x8 a0 = {0}, a1 = {0};
    for (int64_t d = 0; d < D; d += 16) { /* the last chunk padded with zeros */
      uint16_t t[16] = {0};
      memcpy(t, row + d, (size_t)(D - d < 16 ? D - d : 16) * 2);
      f32x8 h0 = widen8(t), h1 = widen8(t + 8);
      a0 = a0 + h0 * h0;
      a1 = a1 + h1 * h1;
    }
    float a[8];
    f32x8 sum = a0 + a1;
    memcpy(a, &sum, sizeof a);
    float total = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    float inv = 1.0f / sqrtf(total / (float)D + eps);
    for (int64_t d = 0; d < D; d++)
      out[m * D + d] = to_bf16(from_bf16(w[d]) * from_bf16(to_bf16(from_bf16(row[d]) * inv)));
  }
}

/* Rotary embedding and the split into heads (as avx512.c's bi_rotary_split): x * cos + rotate_half(x) * sin. */
void bi_rotary_split(const uint16_t *qkv, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D,
                     const uint16_t *cos, const uint16_t *sin, uint16_t *q, uint16_t *k, uint16_t *v) {
  int64_t W = (H + 2 * Hkv) * D, half = D / 2, heads = H + 2 * Hkv;
#pragma omp parallel for schedule(static) if (B * S * heads > 64)
  for (int64_t task = 0; task < B * S * heads; task++) {
    int64_t bs = task / heads, h = task % heads, b = bs / S, s = bs % S;
    const uint16_t *src = qkv + bs * W + h * D;
    uint16_t *dst = h < H ? q + ((b * H + h) * S + s) * D
                  : h < H + Hkv ? k + ((b * Hkv + (h - H)) * S + s) * D
                  : v + ((b * Hkv + (h - H - Hkv)) * S + s) * D;
    if (h >= H + Hkv) {
      memcpy(dst, src, (size_t)D * sizeof(uint16_t));
      continue;
    }
    const uint16_t *c = cos + bs * D, *sn = sin + bs * D;
    for (int64_t d = 0; d < D; d++) {
      float r = d < half ? -from_bf16(src[d + half]) : from_bf16(src[d - half]);
      dst[d] = to_bf16(MADD(from_bf16(src[d]), from_bf16(c[d]), r * from_bf16(sn[d])));
    }
  }
}

/* out[m, i] = silu(gu[m, i]) * gu[m, I + i] in fp32, rounded once; gu: (M, 2I), out: (M, I). */
#ifndef BI_OWN_SILU
void bi_silu_mul(const uint16_t *gu, int64_t M, int64_t I, uint16_t *out) {
#pragma omp parallel for schedule(static) if (M * I > 65536)
  for (int64_t m = 0; m < M; m++)
    for (int64_t i = 0; i < I; i++) {
      float g = from_bf16(gu[m * 2 * I + i]), u = from_bf16(gu[m * 2 * I + I + i]);
      out[m * I + i] = to_bf16((g / (1.0f + exp_clamped(-g))) * u);
    }
}
#endif

#ifndef BI_STEP_AFTER /* amx.c includes step.c itself, after its own bi_linear */
#include "step.c"    /* a whole forward in one call (kernels/step.py); avx2.c and avx512.c get it through this file */
#endif
