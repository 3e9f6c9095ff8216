/* Batch-invariant bf16 kernels for x86-64 CPUs with AVX512-BF16 and -VNNI: portable.c's definitions, with what a
 * step or a prefill spends its time in written for AVX512: the bf16 linear (vdpbf16ps), the draft's int8 and int4
 * linears (vpdpbusd) and their per-call quantisation of the input rows, the attention, and read_sum (the bandwidth
 * probe). The norms, the rotary embedding and SiLU are portable.c's (GCC vectorises them with this file's flags;
 * their bits are portable.c's definition, as in every variant with fused multiply-adds).
 *
 * Every output element is computed by one fixed sequence of operations that depends only on its own
 * inputs: a row of the linear layer never sees how many other rows share the call, and a query of the
 * attention never sees how many other queries, or which masked keys, share the pass. So a position's
 * logits are bitwise the same whether the target scores it alone (the target alone, HF generate) or
 * inside a verification pass of k + 1 tokens, a token tree or a batch.
 *
 * bf16 values travel as uint16_t. Accumulation is fp32 (vdpbf16ps), rounding to bf16 is
 * round-to-nearest-even (vcvtneps2bf16 in this file's kernels, which flushes a float32 below the normal range to
 * zero; portable.c's to_bf16 in the rest, which rounds it to a bf16 subnormal).
 */
#define BI_OWN_LINEARS
#define BI_OWN_LINEAR_REF
#define BI_OWN_ATTENTION
#define BI_OWN_QUANTIZE
#define BI_OWN_READ_SUM
#include <immintrin.h>

#include "portable.c" /* from_bf16, to_bf16, the norms, rotary, SiLU, and step.c (unless BI_STEP_AFTER) */

#define NB 6 /* the most weight rows per register block */
#define MB 8 /* the most input rows per register block */
/* Weight blocks are prefetched into L2 this many blocks ahead: the hardware prefetcher alone leaves the
 * loads waiting, and the multiply-adds of a multi-row pass then stop overlapping with the streaming. */
#define AHEAD 2
/* Software prefetch distances, in bytes along a thread's weight stream (its blocks are contiguous): one-row passes
 * are a plain stream, and the farther lead keeps more lines in flight than AHEAD blocks did (int4 one row:
 * docs/levers.md). */
#ifndef PF_I4
#define PF_I4 16384
#endif
#ifndef PF_I8
#define PF_I8 32768
#endif
/* Input rows per cache block: a block of weight rows is read from memory once per MC rows and reused
 * from cache by all of them. */
#define MC 128

static inline __m512bh load_bf16(const uint16_t *p, int64_t left) {
  if (left >= 32) return (__m512bh)_mm512_loadu_si512((const void *)p);
  return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1u << left) - 1u), p);
}

static inline __m512 widen(__m256bh h) { /* 16 bf16 -> 16 fp32, exactly */
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
}


/* The horizontal sum of one accumulator: the tree of _mm512_reduce_add_ps, lanes (i, i + 8), then
 * (i, i + 4), then (i, i + 2), then (0, 1). reduce16 computes the same tree for 16 accumulators at once
 * with shuffles, so a sum's bits never depend on how many accumulators were reduced together. */
static inline float reduce1(__m512 v) { return _mm512_reduce_add_ps(v); }

static inline __m512 pair8(__m512 a, __m512 b) { /* [a_i + a_{i+8}, b_i + b_{i+8}] */
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
static inline __m512 pair4(__m512 ab, __m512 cd) { /* per 128-bit lane, one accumulator: x_i + x_{i+4} */
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}
static inline __m512 pair2(__m512 t1, __m512 t2) { /* per 128-bit lane: [t1_0 + t1_2, t1_1 + t1_3, t2_0 + t2_2, t2_1 + t2_3] */
  return _mm512_add_ps(_mm512_shuffle_ps(t1, t2, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(t1, t2, _MM_SHUFFLE(3, 2, 3, 2)));
}
static inline __m512 pair1(__m512 u1, __m512 u2) { /* per 128-bit lane: [u1_0 + u1_1, u1_2 + u1_3, u2_0 + u2_1, u2_2 + u2_3] */
  return _mm512_add_ps(_mm512_shuffle_ps(u1, u2, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(u1, u2, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* v[0..15] -> lane i = the horizontal sum of v[i]. */
static inline __m512 reduce16v(const __m512 *v) {
  __m512 s[8], t[4], u[2];
  for (int i = 0; i < 8; i++) s[i] = pair8(v[2 * i], v[2 * i + 1]);   /* s[i]: v[2i] | v[2i+1] */
  for (int i = 0; i < 4; i++) t[i] = pair4(s[2 * i], s[2 * i + 1]);   /* t[i] lanes: v[4i], v[4i+1], v[4i+2], v[4i+3] */
  for (int i = 0; i < 2; i++) u[i] = pair2(t[2 * i], t[2 * i + 1]);   /* u[i] lane l: t[2i] of v[4(2i)+l], t[2i+1] of v[4(2i+1)+l] */
  __m512 r = pair1(u[0], u[1]);  /* 128-bit lane l: [v[l], v[4 + l], v[8 + l], v[12 + l]] */
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, r);
}

static inline void reduce16(const __m512 *v, float *out) { _mm512_storeu_ps(out, reduce16v(v)); }

static inline void reduce_many(const __m512 *v, int n, float *out) {
  int i = 0;
  for (; i + 16 <= n; i += 16) reduce16(v + i, out + i);
  for (; i < n; i++) out[i] = reduce1(v[i]);
}

/* out[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) for rows m0..m0+mb, columns n0..n0+nb (nb <= NB, mb <= MB).
 * Per (m, n): 16 fp32 lanes, each accumulating its pairs of k over the chunks of 32 in order, then one
 * fixed horizontal sum: a function of x[m] and w[n] alone. */
static inline __attribute__((always_inline)) void block(const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t K,
                                                        const uint16_t *bias, const uint16_t *resid, uint16_t *out,
                                                        int64_t ldo, int mb, int nb) {
  __m512 acc[MB][NB];
  for (int i = 0; i < MB; i++)
    for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
  int64_t full = K & ~(int64_t)31;
  for (int64_t k = 0; k < full; k += 32) {
    __m512bh wv[NB] = {0};
    for (int j = 0; j < NB; j++)
      if (j < nb) {
        _mm_prefetch((const char *)(w + (j + AHEAD * nb) * K + k), _MM_HINT_T1);
        wv[j] = (__m512bh)_mm512_loadu_si512((const void *)(w + j * K + k));
      }
    for (int i = 0; i < MB; i++) {
      if (i >= mb) break;
      __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + i * ldx + k));
      for (int j = 0; j < NB; j++)
        if (j < nb) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  if (full < K) { /* the last partial chunk: masked loads, zeros beyond K add exact zeros */
    __m512bh wv[NB] = {0};
    for (int j = 0; j < NB; j++)
      if (j < nb) wv[j] = load_bf16(w + j * K + full, K - full);
    for (int i = 0; i < MB; i++) {
      if (i >= mb) break;
      __m512bh xv = load_bf16(x + i * ldx + full, K - full);
      for (int j = 0; j < NB; j++)
        if (j < nb) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  /* Epilogue: the horizontal sums, 16 at a time, then bias and rounding, one row at a time. */
  __m512 live[MB * NB];
  int c = 0;
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) live[c++] = acc[i][j];
  float res[MB * NB];
  reduce_many(live, c, res);
  __mmask16 cols = (__mmask16)((1u << nb) - 1u);
  __m512 b = bias ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cols, bias)), 16))
                  : _mm512_setzero_ps();
  for (int i = 0; i < mb; i++) {
    __m256bh r = _mm512_cvtneps_pbh(_mm512_add_ps(_mm512_maskz_loadu_ps(cols, res + i * nb), b));
    if (resid) /* the residual stream: the rounded result plus the residual, rounded again (as two bf16 ops) */
      r = _mm512_cvtneps_pbh(_mm512_add_ps(widen(r), widen((__m256bh)_mm256_maskz_loadu_epi16(cols, resid + i * ldo))));
    _mm256_mask_storeu_epi16(out + i * ldo, cols, (__m256i)r);
  }
}

/* Specialisations with compile-time sizes, so the accumulators live in registers: every (rows, weight rows)
 * a pass can ask for, the remainders included (a remainder through the generic block spills to memory). */
typedef void (*block_fn)(const uint16_t *, int64_t, const uint16_t *, int64_t, const uint16_t *, const uint16_t *,
                         uint16_t *, int64_t);
#define BLOCK(MBV, NBV)                                                                                       \
  static void block_##MBV##_##NBV(const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t K,              \
                                  const uint16_t *bias, const uint16_t *resid, uint16_t *out, int64_t ldo) { \
    block(x, ldx, w, K, bias, resid, out, ldo, MBV, NBV);                                                    \
  }
#define BLOCKS(NBV) BLOCK(1, NBV) BLOCK(2, NBV) BLOCK(3, NBV) BLOCK(4, NBV) BLOCK(5, NBV) BLOCK(6, NBV) BLOCK(7, NBV) BLOCK(8, NBV)
BLOCKS(1) BLOCKS(2) BLOCKS(3) BLOCKS(4) BLOCKS(5) BLOCKS(6)
#define ROW(NBV) {0, block_1_##NBV, block_2_##NBV, block_3_##NBV, block_4_##NBV, block_5_##NBV, block_6_##NBV, block_7_##NBV, block_8_##NBV}
static const block_fn BLOCKS_[NB + 1][MB + 1] = {{0}, ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6)};

/* The register block for a pass of M rows: up to 8 rows in one block (the weights stream once and are used
 * from registers by every row), more rows in near-equal blocks of at most 6 (then each block of weight rows
 * is read from memory once per cache block of rows and reused from L1/L2). */
static void shape(int64_t M, int *rows, int *nbv) {
  static const int nb_for_rows[MB + 1] = {0, 6, 6, 6, 6, 5, 4, 3, 3};
  if (M <= MB) {
    *rows = (int)M;
  } else {
    int64_t blocks = (M + 5) / 6;
    *rows = (int)((M + blocks - 1) / blocks);
  }
  *nbv = nb_for_rows[*rows];
}

/* x: (M, K), w: (N, K), bias: (N,) or NULL, resid: (M, N) or NULL (added to the result), out: (M, N); all
 * bf16, row-major, contiguous.
 * The register block is chosen by the rows of the pass, but every block computes each element by the same
 * sequence (block() above): the choice never changes a bit. */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
  int rows, nbv;
  shape(M, &rows, &nbv);
  int64_t nblocks = (N + nbv - 1) / nbv;
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    int64_t mc = M - m0 < MC ? M - m0 : MC;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
      int64_t n0 = b * nbv;
      int nb = N - n0 < nbv ? (int)(N - n0) : nbv;
      const uint16_t *wb = w + n0 * K;
      const uint16_t *bb = bias ? bias + n0 : NULL;
      for (int64_t m = m0; m < m0 + mc; m += rows) {
        int mb = m0 + mc - m < rows ? (int)(m0 + mc - m) : rows;
        BLOCKS_[nb][mb](x + m * K, K, wb, K, bb, resid ? resid + m * N + n0 : NULL, out + m * N + n0, N);
      }
    }
  }
}

/* The definition, one element at a time (tests compare bi_linear with it, bitwise). */
void bi_linear_ref(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                   const uint16_t *resid, uint16_t *out) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++)
      block(x + m * K, K, w + n * K, K, bias ? bias + n : NULL, resid ? resid + m * N + n : NULL, out + m * N + n, N, 1, 1);
}

/* Read bandwidth: sum a buffer of n floats with every thread, reps times; returns the sum (kept so the
 * compiler cannot drop the reads). */
double read_sum(const float *buf, int64_t n, int reps) {
  double total = 0;
  for (int r = 0; r < reps; r++) {
#pragma omp parallel reduction(+ : total)
    {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; i += 64) {
        _mm_prefetch((const char *)(buf + i + 65536), _MM_HINT_T1); /* 256 KB ahead: the best distance here */
        _mm_prefetch((const char *)(buf + i + 65536 + 32), _MM_HINT_T1);
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(buf + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(buf + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(buf + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(buf + i + 48));
      }
      total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
  }
  return total;
}

/* ------------------------------------------------------------------------------------------------
 * Attention, one query at a time. For query (b, h, i) the keys it may see are listed in increasing
 * order (the mask's allowed entries, or 0 .. T - Q + i when there is no mask); its scores, softmax and
 * weighted sum of values are computed over that list alone, in that order. A masked key is skipped, not
 * added as a zero, so a query's result depends only on its own keys: not on the pass's other queries,
 * nor on where a tree or a batch put holes in the cache.
 */

/* exp(x) for x <= 0, elementwise: Cody-Waite range reduction and a degree-6 polynomial (relative error
 * about 2e-7). Vector and tail lanes run the same code, so a value's exp never depends on its lane. */
static inline __m512 exp_le0(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  x = _mm512_max_ps(x, lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* The definition, one query at a time (bi_attention below computes the same bits faster; tests compare them).
 * q: (B, H, Q, D) bf16 with strides sq (elements, per dim); k, v: (B, Hkv, T, D) bf16 with strides sk, sv;
 * allowed: NULL, or uint8 (B, Q, T) with strides sm (0 for a broadcast dim); out: (B, Q, H, D) bf16,
 * contiguous. D is a multiple of 16, at most 256. scratch: per thread, 2 * T floats (scores, key ids). */
void bi_attention_ref(const uint16_t *q, const int64_t *sq, const uint16_t *k, const int64_t *sk, const uint16_t *v,
                  const int64_t *sv, const uint8_t *allowed, const int64_t *sm, uint16_t *out, int64_t B, int64_t H,
                  int64_t Hkv, int64_t Q, int64_t T, int64_t D, float scale, float *scratch) {
  int64_t groups = H / Hkv;
  int64_t tasks = B * H * Q;
#pragma omp parallel
  {
    float *scores = scratch + (int64_t)omp_get_thread_num() * 2 * T;
    int32_t *keys = (int32_t *)(scores + T);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; task++) {
      int64_t b = task / (H * Q), h = (task / Q) % H, i = task % Q, hk = h / groups;
      const uint16_t *qv = q + b * sq[0] + h * sq[1] + i * sq[2];
      const uint16_t *kb = k + b * sk[0] + hk * sk[1];
      const uint16_t *vb = v + b * sv[0] + hk * sv[1];
      int64_t n = 0;
      if (allowed) {
        const uint8_t *row = allowed + b * sm[0] + i * sm[1];
        for (int64_t j = 0; j < T; j++)
          if (row[j * sm[2]]) keys[n++] = (int32_t)j;
      } else {
        for (int64_t j = 0; j <= T - Q + i; j++) keys[n++] = (int32_t)j;
      }
      uint16_t *o = out + ((b * Q + i) * H + h) * D;
      if (n == 0) { memset(o, 0, D * sizeof(uint16_t)); continue; }
      /* scores: 16 keys at a time through reduce16 (the same tree as reduce1 for the rest) */
      __m512bh qc[8];
      for (int64_t d = 0; d < D; d += 32) qc[d / 32] = load_bf16(qv + d, D - d);
      int64_t j = 0;
      __m512 acc[16];
      for (; j + 16 <= n; j += 16) {
        for (int t = 0; t < 16; t++) {
          const uint16_t *kr = kb + keys[j + t] * sk[2];
          __m512 a = _mm512_setzero_ps();
          for (int64_t d = 0; d < D; d += 32) a = _mm512_dpbf16_ps(a, qc[d / 32], load_bf16(kr + d, D - d));
          acc[t] = a;
        }
        reduce16(acc, scores + j);
      }
      for (; j < n; j++) {
        const uint16_t *kr = kb + keys[j] * sk[2];
        __m512 a = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 32) a = _mm512_dpbf16_ps(a, qc[d / 32], load_bf16(kr + d, D - d));
        scores[j] = reduce1(a);
      }
      /* softmax over the list: the max, then exp(s - max) in chunks of 16 from the list's start */
      float mx = -INFINITY;
      for (j = 0; j < n; j++) {
        scores[j] *= scale;
        if (scores[j] > mx) mx = scores[j];
      }
      __m512 vmx = _mm512_set1_ps(mx);
      for (j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 s = _mm512_maskz_loadu_ps(m, scores + j);
        _mm512_mask_storeu_ps(scores + j, m, exp_le0(_mm512_sub_ps(s, vmx)));
      }
      /* the weighted sum of values and the normaliser, key by key in list order */
      __m512 ov[16];
      int64_t chunks = D / 16;
      for (int64_t c = 0; c < chunks; c++) ov[c] = _mm512_setzero_ps();
      float l = 0.0f;
      for (j = 0; j < n; j++) {
        float p = scores[j];
        l += p;
        __m512 pv = _mm512_set1_ps(p);
        const uint16_t *vr = vb + keys[j] * sv[2];
        for (int64_t c = 0; c < chunks; c++) {
          __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(vr + 16 * c))), 16));
          ov[c] = _mm512_fmadd_ps(pv, x, ov[c]);
        }
      }
      __m512 inv = _mm512_set1_ps(1.0f / l);
      for (int64_t c = 0; c < chunks; c++)
        _mm256_storeu_si256((__m256i *)(o + 16 * c), (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(ov[c], inv)));
    }
  }
}

/* ------------------------------------------------------------------------------------------------
 * Attention for passes of many queries (a long prompt, a verification, a tree), computing bi_attention_ref's
 * bits: each key and value row is read once for a block of query rows that share it (the heads of one
 * key/value group at a few consecutive positions) instead of once per query. The block works over the union
 * of its rows' keys, in order; a key that another row of the block sees and this row does not gets a weight of
 * exactly 0, and adding 0 (or 0 * v) to a sum started at +0 leaves its bits as they were. So every row still
 * computes over its own keys, in order, by the reference's operations.
 */

/* Scores of one or two query rows against n keys: per pair, the reference's sum over D in chunks of 32 and
 * the fixed horizontal tree (reduce16 = reduce1), times scale. */
static inline __attribute__((always_inline)) void qk_rows(int nr, const uint16_t *const *qr, const uint16_t *kb,
                                                          int64_t skt, const int32_t *keys, int64_t n, int64_t D,
                                                          float scale, float *const *dst) {
  __m512bh qc[2][8];
  int64_t nd = (D + 31) / 32;
  for (int r = 0; r < nr; r++)
    for (int64_t c = 0; c < nd; c++) qc[r][c] = load_bf16(qr[r] + 32 * c, D - 32 * c);
  const int per = 16 / nr; /* keys per reduce16 */
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 acc[16];
  for (int64_t j0 = 0; j0 < n; j0 += per) {
    int live = n - j0 < per ? (int)(n - j0) : per;
    for (int t = 0; t < per; t++) {
      /* past the end: the last key again, its sums discarded (no branch in the full chunks) */
      const uint16_t *kr = kb + keys[j0 + (t < live ? t : live - 1)] * skt;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      for (int64_t c = 0; c < nd; c++) {
        __m512bh kv = load_bf16(kr + 32 * c, D - 32 * c);
        a0 = _mm512_dpbf16_ps(a0, qc[0][c], kv);
        if (nr == 2) a1 = _mm512_dpbf16_ps(a1, qc[1][c], kv);
      }
      acc[t] = a0;
      if (nr == 2) acc[per + t] = a1;
    }
    __m512 sums = _mm512_mul_ps(reduce16v(acc), vscale);
    if (nr == 1) {
      _mm512_mask_storeu_ps(dst[0] + j0, (__mmask16)((1u << live) - 1u), sums);
    } else {
      __mmask16 m = (__mmask16)((1u << live) - 1u);
      _mm512_mask_storeu_ps(dst[0] + j0, m, sums);
      _mm512_mask_storeu_ps(dst[1] + j0 - 8, (__mmask16)(m << 8), sums);
    }
  }
}

/* The weighted sums of values of RP rows (their weights p, 0 where a row does not see a key), NC chunks of 16
 * of D: the reference's fmadd per key in key order, and its sum of the weights. */
#define PV_ROWS(RP, NC)                                                                                          \
  static void pv_##RP##_##NC(int nr, float *const *pr, const uint16_t *vb, int64_t svt, const int32_t *keys,    \
                             int64_t n, float *l, float *ov) {                                                  \
    __m512 acc[RP][NC];                                                                                          \
    float sum[RP];                                                                                               \
    for (int r = 0; r < RP; r++) {                                                                               \
      sum[r] = 0.0f;                                                                                             \
      for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();                                             \
    }                                                                                                            \
    for (int64_t j = 0; j < n; j++) {                                                                            \
      const uint16_t *vr = vb + keys[j] * svt;                                                                   \
      __m512 pv[RP] = {0};                                                                                       \
      for (int r = 0; r < RP; r++)                                                                               \
        if (r < nr) {                                                                                            \
          sum[r] += pr[r][j];                                                                                    \
          pv[r] = _mm512_set1_ps(pr[r][j]);                                                                      \
        }                                                                                                        \
      for (int c = 0; c < NC; c++) {                                                                             \
        __m512 x = widen((__m256bh)_mm256_loadu_si256((const __m256i *)(vr + 16 * c)));                           \
        for (int r = 0; r < RP; r++)                                                                             \
          if (r < nr) acc[r][c] = _mm512_fmadd_ps(pv[r], x, acc[r][c]);                                          \
      }                                                                                                          \
    }                                                                                                            \
    for (int r = 0; r < nr; r++) {                                                                               \
      l[r] = sum[r];                                                                                             \
      for (int c = 0; c < NC; c++) _mm512_storeu_ps(ov + (r * NC + c) * 16, acc[r][c]);                          \
    }                                                                                                            \
  }
PV_ROWS(3, 8) PV_ROWS(6, 4)

/* One row, any D (a multiple of 16 up to 256). */
static void pv_any(float *p, const uint16_t *vb, int64_t svt, const int32_t *keys, int64_t n, int64_t D, float *l,
                   float *ov) {
  __m512 acc[16];
  int64_t chunks = D / 16;
  for (int64_t c = 0; c < chunks; c++) acc[c] = _mm512_setzero_ps();
  float sum = 0.0f;
  for (int64_t j = 0; j < n; j++) {
    sum += p[j];
    __m512 pv = _mm512_set1_ps(p[j]);
    const uint16_t *vr = vb + keys[j] * svt;
    for (int64_t c = 0; c < chunks; c++)
      acc[c] = _mm512_fmadd_ps(pv, widen((__m256bh)_mm256_loadu_si256((const __m256i *)(vr + 16 * c))), acc[c]);
  }
  *l = sum;
  for (int64_t c = 0; c < chunks; c++) _mm512_storeu_ps(ov + 16 * c, acc[c]);
}

/* As bi_attention_ref (same arguments but the scratch, which each thread allocates here). */
void bi_attention(const uint16_t *q, const int64_t *sq, const uint16_t *k, const int64_t *sk, const uint16_t *v,
                  const int64_t *sv, const uint8_t *allowed, const int64_t *sm, uint16_t *out, int64_t B, int64_t H,
                  int64_t Hkv, int64_t Q, int64_t T, int64_t D, float scale) {
  int64_t G = H / Hkv, threads = omp_get_max_threads();
  /* A task: the Gt heads of one group at P consecutive positions (about 24 rows); smaller tasks when the pass
   * would not give every thread work. */
  int64_t P = G >= 24 ? 1 : 24 / G, Gt = G;
  if (P > Q) P = Q;
  while (P > 1 && B * Hkv * ((Q + P - 1) / P) < 2 * threads) P = (P + 1) / 2;
  while (Gt > 1 && B * Hkv * ((G + Gt - 1) / Gt) * ((Q + P - 1) / P) < threads) Gt = (Gt + 1) / 2;
  int64_t hsplit = (G + Gt - 1) / Gt, pblocks = (Q + P - 1) / P, tasks = B * Hkv * hsplit * pblocks;
  int64_t R = Gt * P, chunks = D / 16;
#pragma omp parallel
  {
    float *scores = (float *)malloc(sizeof(float) * (size_t)(R * (T > 0 ? T : 1)));
    float *ovs = (float *)malloc(sizeof(float) * (size_t)(R * D));
    float *ls = (float *)malloc(sizeof(float) * (size_t)R);
    int32_t *keys = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T > 0 ? T : 1));
    uint8_t *ok = (uint8_t *)malloc((size_t)(P * (T > 0 ? T : 1)));
    int64_t *seen = (int64_t *)malloc(sizeof(int64_t) * (size_t)P);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
      int64_t pb = task % pblocks, rest = task / pblocks;
      int64_t hs = rest % hsplit;
      rest /= hsplit;
      int64_t hk = rest % Hkv, b = rest / Hkv;
      int64_t i0 = pb * P, np = Q - i0 < P ? Q - i0 : P;
      int64_t g0 = hs * Gt, ng = G - g0 < Gt ? G - g0 : Gt, rows = np * ng;
      /* the union of the positions' keys, in order, and which of them each position sees */
      int64_t n = 0;
      for (int64_t p = 0; p < np; p++) seen[p] = 0;
      if (allowed) {
        for (int64_t j = 0; j < T; j++) {
          int any = 0;
          for (int64_t p = 0; p < np; p++) {
            uint8_t a = allowed[b * sm[0] + (i0 + p) * sm[1] + j * sm[2]] != 0;
            ok[p * T + n] = a;
            seen[p] += a;
            any |= a;
          }
          if (any) keys[n++] = (int32_t)j;
        }
      } else {
        int64_t last = T - Q + i0 + np - 1; /* the block's last position sees keys 0 .. last */
        for (int64_t j = 0; j <= last; j++) keys[n++] = (int32_t)j;
        for (int64_t p = 0; p < np; p++) {
          int64_t upto = T - Q + i0 + p;
          for (int64_t j = 0; j < n; j++) ok[p * T + j] = j <= upto;
          seen[p] = upto + 1 > 0 ? upto + 1 : 0;
        }
      }
      const uint16_t *kb = k + b * sk[0] + hk * sk[1], *vb = v + b * sv[0] + hk * sv[1];
      /* row r: position i0 + r / ng, head hk * G + g0 + r % ng */
      const uint16_t *qr[2];
      float *dst[2];
      for (int64_t r = 0; r < rows; r += 2) {
        int nr = rows - r >= 2 ? 2 : 1;
        for (int t = 0; t < nr; t++) {
          int64_t rr = r + t, i = i0 + rr / ng, h = hk * G + g0 + rr % ng;
          qr[t] = q + b * sq[0] + h * sq[1] + i * sq[2];
          dst[t] = scores + rr * T;
        }
        if (nr == 2) qk_rows(2, qr, kb, sk[2], keys, n, D, scale, dst);
        else qk_rows(1, qr, kb, sk[2], keys, n, D, scale, dst);
      }
      /* the softmax's numerators over each row's own keys (0 for the others) */
      for (int64_t r = 0; r < rows; r++) {
        float *s = scores + r * T;
        const uint8_t *mine = ok + (r / ng) * T;
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n; j += 16) {
          __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
          __mmask16 sees = _mm512_mask_cmpneq_epi32_mask(m, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, mine + j)),
                                                         _mm512_setzero_si512());
          vmax = _mm512_mask_max_ps(vmax, sees, _mm512_maskz_loadu_ps(sees, s + j), vmax); /* a NaN score is passed over, as in the reference */
        }
        float mx = _mm512_reduce_max_ps(vmax); /* a max: the same whatever the order */
        __m512 vmx = _mm512_set1_ps(mx);
        for (int64_t j = 0; j < n; j += 16) {
          __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
          __m512 e = exp_le0(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vmx));
          __mmask16 sees = _mm512_mask_cmpneq_epi32_mask(m, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, mine + j)),
                                                         _mm512_setzero_si512());
          _mm512_mask_storeu_ps(s + j, m, _mm512_maskz_mov_ps(sees, e));
        }
      }
      /* the weighted sums of values, RP rows at a time */
      int rp = chunks == 8 ? 3 : chunks == 4 ? 6 : 1;
      for (int64_t r = 0; r < rows; r += rp) {
        int nr = rows - r >= rp ? rp : (int)(rows - r);
        float *pr[6];
        for (int t = 0; t < nr; t++) pr[t] = scores + (r + t) * T;
        if (chunks == 8) pv_3_8(nr, pr, vb, sv[2], keys, n, ls + r, ovs + r * D);
        else if (chunks == 4) pv_6_4(nr, pr, vb, sv[2], keys, n, ls + r, ovs + r * D);
        else pv_any(pr[0], vb, sv[2], keys, n, D, ls + r, ovs + r * D);
      }
      for (int64_t r = 0; r < rows; r++) {
        int64_t i = i0 + r / ng, h = hk * G + g0 + r % ng;
        uint16_t *o = out + ((b * Q + i) * H + h) * D;
        if (seen[r / ng] == 0) { memset(o, 0, D * sizeof(uint16_t)); continue; }
        __m512 inv = _mm512_set1_ps(1.0f / ls[r]);
        for (int64_t c = 0; c < chunks; c++)
          _mm256_storeu_si256((__m256i *)(o + 16 * c),
                              (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(ovs + r * D + 16 * c), inv)));
      }
    }
    free(scores); free(ovs); free(ls); free(keys); free(ok); free(seen);
  }
}

/* ------------------------------------------------------------------------------------------------
 * int8 weights for a draft (AVX512-VNNI): W (N, K) int8 with a scale per row, x quantised per row to
 * uint8 (zero point 128) at each call. acc = sum_k xq[k] w[k] in int32 is exact, so this linear is
 * batch-invariant too; y = sx * sw[n] * (acc - 128 rowsum[n]) + bias[n].
 */

/* x: (M, K) bf16 -> xq: (M, Kp) uint8 (K padded with the zero point to Kp, a multiple of 64), sx: (M,).
 * portable.c's values for finite inputs (the same max, scale, and rounding to nearest even), 16 at a time: every
 * int8 and int4 pass calls it, and portable.c's max is a scalar loop GCC does not vectorise (a NaN's order). */
void bi_quantize_rows(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, uint8_t *xq, float *sx) {
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *row = x + m * K;
    __m512 mx = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
      __mmask16 msk = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1u);
      mx = _mm512_max_ps(mx, _mm512_abs_ps(widen((__m256bh)_mm256_maskz_loadu_epi16(msk, row + k))));
    }
    float amax = _mm512_reduce_max_ps(mx);
    float s = amax > 0 ? amax / 127.0f : 1.0f;
    sx[m] = s;
    __m512 inv = _mm512_set1_ps(1.0f / s);
    uint8_t *q = xq + m * Kp;
    for (int64_t k = 0; k < Kp; k += 16) {
      __mmask16 msk = K - k >= 16 ? (__mmask16)0xFFFF : K > k ? (__mmask16)((1u << (K - k)) - 1u) : 0;
      __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(widen((__m256bh)_mm256_maskz_loadu_epi16(msk, row + k)), inv));
      v = _mm512_add_epi32(v, _mm512_set1_epi32(128));
      _mm_storeu_si128((__m128i *)(q + k), _mm512_cvtusepi32_epi8(v));
    }
  }
}

/* The sums of 16 int32 accumulators, lane i = the sum of v[i]: the float reduction's shuffles on the integers'
 * bits (integer sums are exact, so the order is free). */
static inline __m512i reduce16i(const __m512i *v) {
#define F(x) _mm512_castsi512_ps(x)
#define I(x) _mm512_castps_si512(x)
  __m512i s[8], t[4], u[2];
  for (int i = 0; i < 8; i++)
    s[i] = _mm512_add_epi32(I(_mm512_shuffle_f32x4(F(v[2 * i]), F(v[2 * i + 1]), _MM_SHUFFLE(1, 0, 1, 0))),
                            I(_mm512_shuffle_f32x4(F(v[2 * i]), F(v[2 * i + 1]), _MM_SHUFFLE(3, 2, 3, 2))));
  for (int i = 0; i < 4; i++)
    t[i] = _mm512_add_epi32(I(_mm512_shuffle_f32x4(F(s[2 * i]), F(s[2 * i + 1]), _MM_SHUFFLE(2, 0, 2, 0))),
                            I(_mm512_shuffle_f32x4(F(s[2 * i]), F(s[2 * i + 1]), _MM_SHUFFLE(3, 1, 3, 1))));
  for (int i = 0; i < 2; i++)
    u[i] = _mm512_add_epi32(I(_mm512_shuffle_ps(F(t[2 * i]), F(t[2 * i + 1]), _MM_SHUFFLE(1, 0, 1, 0))),
                            I(_mm512_shuffle_ps(F(t[2 * i]), F(t[2 * i + 1]), _MM_SHUFFLE(3, 2, 3, 2))));
  __m512i r = _mm512_add_epi32(I(_mm512_shuffle_ps(F(u[0]), F(u[1]), _MM_SHUFFLE(2, 0, 2, 0))),
                               I(_mm512_shuffle_ps(F(u[0]), F(u[1]), _MM_SHUFFLE(3, 1, 3, 1))));
#undef F
#undef I
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* The integer sums of MB rows of xq against NB rows of w (MB * NB = 16, NB = 16 / MB): lane i * NB + j of the
 * result = row i against weight row j; nb < NB rows of w are read (the others count as zero). */
static inline __attribute__((always_inline)) __m512i block_i8(const uint8_t *xq, int64_t Kp, const int8_t *w,
                                                              int64_t K, int MB_, int nb) {
  const int NB_ = 16 / MB_;
  __m512i acc[16];
  for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
  int64_t full = K & ~(int64_t)63;
  for (int64_t k = 0; k < full; k += 64) {
    for (int j = 0; j < NB_; j++) /* PF_I8 bytes on in the weights (a block of 16 rows is contiguous) */
      _mm_prefetch((const char *)(w + j * K + k + PF_I8), _MM_HINT_T1);
    for (int i = 0; i < MB_; i++) {
      __m512i xv = _mm512_loadu_si512((const void *)(xq + i * Kp + k));
      for (int j = 0; j < NB_; j++)
        if (j < nb) acc[i * NB_ + j] = _mm512_dpbusd_epi32(acc[i * NB_ + j], xv, _mm512_loadu_si512((const void *)(w + j * K + k)));
    }
  }
  if (full < K) {
    __mmask64 msk = (__mmask64)((~0ULL) >> (64 - (K - full)));
    for (int i = 0; i < MB_; i++) {
      __m512i xv = _mm512_loadu_si512((const void *)(xq + i * Kp + full));
      for (int j = 0; j < NB_; j++)
        if (j < nb) acc[i * NB_ + j] = _mm512_dpbusd_epi32(acc[i * NB_ + j], xv, _mm512_maskz_loadu_epi8(msk, w + j * K + full));
    }
  }
  return reduce16i(acc);
}

static __m512i block_i8_1x16(const uint8_t *xq, int64_t Kp, const int8_t *w, int64_t K) { return block_i8(xq, Kp, w, K, 1, 16); }
static __m512i block_i8_2x8(const uint8_t *xq, int64_t Kp, const int8_t *w, int64_t K) { return block_i8(xq, Kp, w, K, 2, 8); }

/* One row's nb outputs from its integer sums (lanes 0..nb-1 of r): sx sw[n] (acc - 128 rowsum[n]) (+ bias)
 * rounded to bf16 (+ resid, rounded again), the same operations for every element whatever its block. */
static inline void finish_i8x16(__m512i r, float sx, const float *sw, const int32_t *rowsum, const uint16_t *bias,
                             const uint16_t *resid, uint16_t *out, int nb) {
  __mmask16 cols = (__mmask16)((1u << nb) - 1u);
  __m512i centred = _mm512_sub_epi32(r, _mm512_mullo_epi32(_mm512_set1_epi32(128), _mm512_maskz_loadu_epi32(cols, rowsum)));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(sx), _mm512_maskz_loadu_ps(cols, sw)), _mm512_cvtepi32_ps(centred));
  if (bias) y = _mm512_add_ps(y, widen((__m256bh)_mm256_maskz_loadu_epi16(cols, bias)));
  __m256bh o = _mm512_cvtneps_pbh(y);
  if (resid) o = _mm512_cvtneps_pbh(_mm512_add_ps(widen(o), widen((__m256bh)_mm256_maskz_loadu_epi16(cols, resid))));
  _mm256_mask_storeu_epi16(out, cols, (__m256i)o);
}

/* y = x W^T (+ bias) (+ resid) with W int8: x (M, K) bf16, w (N, K) int8, sw (N,) fp32, rowsum (N,) int32,
 * bias (N,) bf16 or NULL, resid (M, N) bf16 or NULL; out (M, N) bf16.
 * Blocks of 16 weight rows (contiguous in memory); a pair of input rows takes them 8 at a time, a single row
 * 16 at a time. */
void bi_linear_i8(const uint16_t *x, int64_t M, int64_t K, const int8_t *w, int64_t N, const float *sw,
                  const int32_t *rowsum, const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  int64_t Kp = (K + 63) & ~(int64_t)63;
  uint8_t small[4096 + 64], *scratch = M * (Kp + 4) <= 4096 ? small : (uint8_t *)malloc(M * (Kp + 4));
  float *sx = (float *)(scratch + M * Kp); /* Kp is a multiple of 64: aligned for floats */
  uint8_t *xq = scratch;
  bi_quantize_rows(x, M, K, Kp, xq, sx);
  int64_t nblocks = (N + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblocks; b++) {
    int64_t n0 = b * 16;
    int nb = N - n0 < 16 ? (int)(N - n0) : 16;
    const int8_t *wb = w + n0 * K;
    int64_t m = 0;
    for (; m + 2 <= M; m += 2)
      for (int h = 0; h < 2; h++) {
        int nh = nb - 8 * h < 8 ? nb - 8 * h : 8;
        if (nh <= 0) break;
        int64_t c = n0 + 8 * h;
        __m512i r = nh == 8 ? block_i8_2x8(xq + m * Kp, Kp, wb + 8 * h * K, K) : block_i8(xq + m * Kp, Kp, wb + 8 * h * K, K, 2, nh);
        for (int i = 0; i < 2; i++) {
          __m512i ri = i ? _mm512_alignr_epi32(r, r, 8) : r;
          finish_i8x16(ri, sx[m + i], sw + c, rowsum + c, bias ? bias + c : NULL, resid ? resid + (m + i) * N + c : NULL,
                    out + (m + i) * N + c, nh);
        }
      }
    if (m < M) {
      __m512i r = nb == 16 ? block_i8_1x16(xq + m * Kp, Kp, wb, K) : block_i8(xq + m * Kp, Kp, wb, K, 1, nb);
      finish_i8x16(r, sx[m], sw + n0, rowsum + n0, bias ? bias + n0 : NULL, resid ? resid + m * N + n0 : NULL,
                out + m * N + n0, nb);
    }
  }
  if (scratch != small) free(scratch);
}

/* ------------------------------------------------------------------------------------------------
 * int4 weights for a draft (AVX512-VNNI), groups of G along K (G a multiple of 32 that divides K).
 * A weight row is Kp / 2 bytes (Kp = K rounded up to 128, padded with the zero point): per chunk of 128 k, byte j
 * holds k0 + j in its low nibble and k0 + 64 + j in its high one, each w + 8 (0..15; the quantiser writes -7..7).
 * So a chunk is one 64-byte load, its first 64 weights an AND, its last 64 a shift and an AND. A bf16 scale per
 * (row, group), rows of ceil(Kp / G) (zeros past K). x is quantised per row to int8 at each call; the group's
 * zero point costs nothing: a dot product lane starts at -8 (the sum of its 4 x) and vpdpbusd adds w * x, so the
 * lane's integer sum (4 products, |sum| <= 4064) is exact, and so is its product with the bf16 scale in fp32.
 * Per output element: 16 fp32 lanes, lane l adding (isum_l * s_group) per 64 k in increasing k, then the fixed
 * horizontal tree, y = sx * sum (+ bias), rounded (+ resid, rounded). The same sequence for every block shape.
 */

#define I4_MB 4 /* the most input rows per int4 register block */
#define I4_NB 8 /* the most weight rows per int4 register block */

/* x: (M, K) bf16 -> xs: (M, Kp) int8 (zeros past K), nc: (M, Kp / 4) int32, -8 times the sum of each 4 x, sx. */
static void quantize_rows_i4_vnni(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, int8_t *xs, int32_t *nc, float *sx) {
  bi_quantize_rows(x, M, K, Kp, (uint8_t *)xs, sx); /* uint8 with zero point 128: flip the top bit for int8 */
  const __m512i top = _mm512_set1_epi8((char)0x80), eight = _mm512_set1_epi8(8);
  for (int64_t i = 0; i < M * Kp; i += 64) {
    __m512i v = _mm512_xor_si512(_mm512_loadu_si512((const void *)(xs + i)), top);
    _mm512_storeu_si512((void *)(xs + i), v);
    __m512i s8 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, v);
    _mm512_storeu_si512((void *)(nc + i / 4), _mm512_sub_epi32(_mm512_setzero_si512(), s8));
  }
}

/* The scales of one chunk as fp32 lanes: lo (k0 .. k0 + 63: lanes 0-7 the group of k0, 8-15 that of k0 + 32)
 * and hi (k0 + 64 ..). The four bf16 go to every 128-bit lane, and a byte shuffle puts each in the top half of
 * its 32-bit lanes (zeros below): widened, exactly. */
static inline __attribute__((always_inline)) void scales_i4(const uint16_t *s, int64_t k0, int64_t G, __m512 *lo,
                                                            __m512 *hi) {
  __m512i four;
  if (G == 32)
    four = _mm512_set1_epi64(*(const long long *)(s + k0 / 32));
  else
    four = _mm512_set1_epi64((long long)((uint64_t)s[k0 / G] | (uint64_t)s[(k0 + 32) / G] << 16 |
                                         (uint64_t)s[(k0 + 64) / G] << 32 | (uint64_t)s[(k0 + 96) / G] << 48));
  const __m512i pick_lo = _mm512_set_epi32(0x0302FFFF, 0x0302FFFF, 0x0302FFFF, 0x0302FFFF, 0x0302FFFF, 0x0302FFFF,
                                           0x0302FFFF, 0x0302FFFF, 0x0100FFFF, 0x0100FFFF, 0x0100FFFF, 0x0100FFFF,
                                           0x0100FFFF, 0x0100FFFF, 0x0100FFFF, 0x0100FFFF);
  const __m512i pick_hi = _mm512_add_epi32(pick_lo, _mm512_set1_epi32(0x04040000));
  *lo = _mm512_castsi512_ps(_mm512_shuffle_epi8(four, pick_lo));
  *hi = _mm512_castsi512_ps(_mm512_shuffle_epi8(four, pick_hi));
}

/* The k loop of block_i4: acc[i * I4_NB + j] += row i against weight row j, 16 lanes per element. Fully unrolled
 * over the block (the accumulators stay in registers); G is a constant where the caller passes one (32: a chunk's
 * four scales are contiguous). */
static inline __attribute__((always_inline)) void loop_i4(const int8_t *xs, const int32_t *nc, int64_t Kp,
                                                          const uint8_t *w, const uint16_t *s, int64_t S, int64_t G,
                                                          __m512 *acc, int mb, int nb) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  int64_t ldw = Kp / 2;
  for (int64_t k0 = 0; k0 < Kp; k0 += 128) {
#pragma GCC unroll 8
    for (int j = 0; j < I4_NB; j++) {
      if (j >= nb) break;
      _mm_prefetch((const char *)(w + j * ldw + k0 / 2 + PF_I4), _MM_HINT_T1);
      __m512i v = _mm512_loadu_si512((const void *)(w + j * ldw + k0 / 2));
      __m512i wlo = _mm512_and_si512(v, low), whi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      __m512 slo, shi;
      scales_i4(s + j * S, k0, G, &slo, &shi);
#pragma GCC unroll 4
      for (int i = 0; i < I4_MB; i++) {
        if (i >= mb) break;
        const int8_t *xr = xs + i * Kp + k0;
        const int32_t *cr = nc + i * (Kp / 4) + k0 / 4;
        __m512i ilo = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)cr), wlo, _mm512_loadu_si512((const void *)xr));
        __m512i ihi = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)(cr + 16)), whi,
                                          _mm512_loadu_si512((const void *)(xr + 64)));
        acc[i * I4_NB + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ilo), slo, acc[i * I4_NB + j]);
        acc[i * I4_NB + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ihi), shi, acc[i * I4_NB + j]);
      }
    }
  }
}

/* mb input rows against nb weight rows; acc[i * I4_NB + j]: 16 lanes per element, as the comment above says. */
static inline __attribute__((always_inline)) void block_i4(const int8_t *xs, const int32_t *nc, int64_t Kp,
                                                           const uint8_t *w, const uint16_t *s, int64_t S, int64_t G,
                                                           const uint16_t *bias, const uint16_t *resid, uint16_t *out,
                                                           int64_t ldo, const float *sx, int mb, int nb) {
  __m512 acc[I4_MB * I4_NB];
  for (int i = 0; i < I4_MB * I4_NB; i++) acc[i] = _mm512_setzero_ps();
  if (G == 32)
    loop_i4(xs, nc, Kp, w, s, S, 32, acc, mb, nb);
  else
    loop_i4(xs, nc, Kp, w, s, S, G, acc, mb, nb);
  __m512 live[I4_MB * I4_NB];
  int c = 0;
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) live[c++] = acc[i * I4_NB + j];
  for (; c & 15; c++) live[c] = _mm512_setzero_ps(); /* reduce16's tree is reduce1's: padding changes no sum */
  float res[I4_MB * I4_NB];
  reduce_many(live, c, res);
  __mmask16 cols = (__mmask16)((1u << nb) - 1u);
  __m512 b = bias ? widen((__m256bh)_mm256_maskz_loadu_epi16(cols, bias)) : _mm512_setzero_ps();
  for (int i = 0; i < mb; i++) {
    __m512 y = _mm512_mul_ps(_mm512_set1_ps(sx[i]), _mm512_maskz_loadu_ps(cols, res + i * nb));
    if (bias) y = _mm512_add_ps(y, b);
    __m256bh r = _mm512_cvtneps_pbh(y);
    if (resid) r = _mm512_cvtneps_pbh(_mm512_add_ps(widen(r), widen((__m256bh)_mm256_maskz_loadu_epi16(cols, resid + i * ldo))));
    _mm256_mask_storeu_epi16(out + i * ldo, cols, (__m256i)r);
  }
}

typedef void (*block_i4_fn)(const int8_t *, const int32_t *, int64_t, const uint8_t *, const uint16_t *, int64_t,
                            int64_t, const uint16_t *, const uint16_t *, uint16_t *, int64_t, const float *);
#define BLOCK_I4(MBV, NBV)                                                                                        \
  static void block_i4_##MBV##_##NBV(const int8_t *xs, const int32_t *nc, int64_t Kp, const uint8_t *w,          \
                                     const uint16_t *s, int64_t S, int64_t G, const uint16_t *bias,               \
                                     const uint16_t *resid, uint16_t *out, int64_t ldo, const float *sx) {       \
    block_i4(xs, nc, Kp, w, s, S, G, bias, resid, out, ldo, sx, MBV, NBV);                                      \
  }
#define BLOCKS_I4(NBV) BLOCK_I4(1, NBV) BLOCK_I4(2, NBV) BLOCK_I4(3, NBV) BLOCK_I4(4, NBV)
BLOCKS_I4(1) BLOCKS_I4(2) BLOCKS_I4(3) BLOCKS_I4(4) BLOCKS_I4(5) BLOCKS_I4(6) BLOCKS_I4(7) BLOCKS_I4(8)
#define ROW_I4(NBV) {0, block_i4_1_##NBV, block_i4_2_##NBV, block_i4_3_##NBV, block_i4_4_##NBV}
static const block_i4_fn BLOCKS_I4_[I4_NB + 1][I4_MB + 1] = {{0},        ROW_I4(1), ROW_I4(2), ROW_I4(3), ROW_I4(4),
                                                             ROW_I4(5), ROW_I4(6), ROW_I4(7), ROW_I4(8)};

/* y = x W^T (+ bias) (+ resid) with W int4: x (M, K) bf16; w (N, Kp / 2) uint8 as above; s (N, ceil(Kp / G)) bf16;
 * bias (N,) bf16 or NULL; resid (M, N) bf16 or NULL; out (M, N) bf16. Register blocks: one row against 8 weight
 * rows, 2 against 6, 3 or 4 against 4, more rows in near-equal blocks of at most 4; each weight block is read from
 * memory once per MC rows. Every block computes each element by block_i4's one sequence. */
void bi_linear_i4(const uint16_t *x, int64_t M, int64_t K, const uint8_t *w, int64_t N, const uint16_t *s, int64_t G,
                  const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  static const int nb_for_rows[I4_MB + 1] = {0, 8, 6, 4, 4};
  int64_t Kp = (K + 127) & ~(int64_t)127, S = (Kp + G - 1) / G;
  int rows = M <= I4_MB ? (int)M : (int)((M + (M + I4_MB - 1) / I4_MB - 1) / ((M + I4_MB - 1) / I4_MB));
  int nbv = nb_for_rows[rows];
  size_t bytes = (size_t)M * (size_t)(2 * Kp + 4);
  uint8_t small[8192], *scratch = bytes <= sizeof small ? small : (uint8_t *)malloc(bytes);
  int8_t *xs = (int8_t *)scratch;
  int32_t *nc = (int32_t *)(scratch + M * Kp);
  float *sx = (float *)(scratch + 2 * M * Kp);
  quantize_rows_i4_vnni(x, M, K, Kp, xs, nc, sx);
  int64_t nblocks = (N + nbv - 1) / nbv;
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    int64_t mc = M - m0 < MC ? M - m0 : MC;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
      int64_t n0 = b * nbv;
      int nb = N - n0 < nbv ? (int)(N - n0) : nbv;
      for (int64_t m = m0; m < m0 + mc; m += rows) {
        int mb = m0 + mc - m < rows ? (int)(m0 + mc - m) : rows;
        BLOCKS_I4_[nb][mb](xs + m * Kp, nc + m * (Kp / 4), Kp, w + n0 * (Kp / 2), s + n0 * S, S, G,
                           bias ? bias + n0 : NULL, resid ? resid + m * N + n0 : NULL, out + m * N + n0, N, sx + m);
      }
    }
  }
  if (scratch != small) free(scratch);
}
