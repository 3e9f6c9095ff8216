/* Batch-invariant kernels for x86-64 CPUs with AVX2 and FMA (Intel since Haswell, AMD since Zen), which lack
 * AVX512-BF16: portable.c's definitions, with the linears written in AVX2 so that a one-token step streams its
 * weights at the memory's pace and a prefill keeps both FMA ports busy.
 *
 * The bf16 linear: a chunk of 16 bf16 weights is one 256-bit load; AND with 0xFFFF0000 gives the odd elements
 * as fp32, a shift left by 16 the even ones (exact). The input rows are split the same way once per call. Lane
 * i then takes fma(w[2i + 1], x[2i + 1], acc), then fma(w[2i], x[2i], acc), chunk after chunk: portable.c's
 * chunk(), in the same order; the epilogue is its finish(). Every register block computes each element by that
 * one sequence, so a row's bits never depend on the pass.
 * Passes of 24 rows or more compute the same sequence as outer products over repacked weight panels (outer()).
 * The softmax's and SiLU's exp run 8 lanes at a time by portable.c's operations (exp8).
 * The int8 linear: integer sums are exact in any order (vpmaddwd on int16, no saturation), and the epilogue is
 * portable.c's finish_i8().
 */
#define BI_OWN_LINEARS
#define BI_OWN_EXP
#define BI_OWN_SILU
/* acc + a * b for 8 lanes where a * b is exact (two bf16): portable.c's attention scores; one FMA, the same bits. */
#define EXACT_MADD8(acc, a, b) ((f32x8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(acc)))
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* portable.c's exp_clamped for 8 lanes, by the same operations (MADD is a fused multiply-add in this build,
 * nearbyintf rounds to nearest even as _mm256_round_ps does here), so the same bits. */
static inline __m256 exp8(__m256 x) {
  x = _mm256_blendv_ps(x, _mm256_set1_ps(-87.0f), _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ));
  x = _mm256_blendv_ps(x, _mm256_set1_ps(88.0f), _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 neg = _mm256_xor_ps(n, _mm256_set1_ps(-0.0f));
  __m256 r = _mm256_fmadd_ps(neg, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(neg, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* The attention's exp_shifted (portable.c), 8 scores at a time; the last few through a padded copy. */
static void exp_shifted(float *s, int64_t n, float mx) {
  __m256 m = _mm256_set1_ps(mx);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m)));
  if (j < n) {
    float t[8] = {0};
    memcpy(t, s + j, sizeof(float) * (size_t)(n - j));
    _mm256_storeu_ps(t, exp8(_mm256_sub_ps(_mm256_loadu_ps(t), m)));
    memcpy(s + j, t, sizeof(float) * (size_t)(n - j));
  }
}

#include "portable.c"

#define MC 128   /* input rows per cache block: a weight block is read from memory once per MC rows */
#ifndef GROUP
#define GROUP 16 /* weight blocks a block of rows passes in turn (kept in L2) */
#endif
#define AHEAD 2  /* weight blocks prefetched ahead into L2 */
#define MAXMB 6  /* input rows per register block */
#define MAXNB 4  /* weight rows per register block */

/* Rows m of x (bf16, K wide) as fp32 in xs (Kp wide, Kp = K rounded up to 16, zeros beyond K): per chunk of 16,
 * the 8 odd elements, then the 8 even ones. */
static void split_rows(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, float *xs) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
#pragma omp parallel for schedule(static) if (M * K > 65536)
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < Kp; k += 16) {
      uint16_t tmp[16] = {0};
      const uint16_t *src = x + m * K + k;
      if (k + 16 > K) {
        memcpy(tmp, src, (size_t)(K - k) * 2);
        src = tmp;
      }
      __m256i v = _mm256_loadu_si256((const __m256i *)src);
      _mm256_storeu_ps(xs + m * Kp + k, _mm256_castsi256_ps(_mm256_and_si256(v, hi)));
      _mm256_storeu_ps(xs + m * Kp + k + 8, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
}

/* One chunk of 16 k for the block: the weight rows' chunks (split into odd and even fp32) against every row. */
static inline __attribute__((always_inline)) void step(__m256 acc[MAXMB][MAXNB], const __m256i *wv, const float *xs,
                                                       int64_t Kp, int64_t k, int mb, int nb) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  __m256 wo[MAXNB], we[MAXNB];
  for (int j = 0; j < MAXNB; j++)
    if (j < nb) {
      wo[j] = _mm256_castsi256_ps(_mm256_and_si256(wv[j], hi));
      we[j] = _mm256_castsi256_ps(_mm256_slli_epi32(wv[j], 16));
    }
  for (int i = 0; i < MAXMB; i++) {
    if (i >= mb) break;
    __m256 xo = _mm256_loadu_ps(xs + i * Kp + k), xe = _mm256_loadu_ps(xs + i * Kp + k + 8);
    for (int j = 0; j < MAXNB; j++)
      if (j < nb) {
        acc[i][j] = _mm256_fmadd_ps(wo[j], xo, acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(we[j], xe, acc[i][j]);
      }
  }
}

/* out[m, n] for mb rows of xs and nb weight rows: the full chunks (no branch, so the accumulators stay in
 * registers), then the last partial chunk with zeros beyond K (0 * 0 added to a lane, as portable.c pads). */
static inline __attribute__((always_inline)) void block(const float *xs, int64_t Kp, const uint16_t *w, int64_t K,
                                                        const uint16_t *bias, const uint16_t *resid, uint16_t *out,
                                                        int64_t ldo, int mb, int nb) {
  __m256 acc[MAXMB][MAXNB];
  for (int i = 0; i < MAXMB; i++)
    for (int j = 0; j < MAXNB; j++) acc[i][j] = _mm256_setzero_ps();
  int64_t full = K & ~(int64_t)15;
  __m256i wv[MAXNB];
  for (int64_t k = 0; k < full; k += 16) {
    for (int j = 0; j < MAXNB; j++)
      if (j < nb) {
        _mm_prefetch((const char *)(w + (j + AHEAD * nb) * K + k), _MM_HINT_T1);
        wv[j] = _mm256_loadu_si256((const __m256i *)(w + j * K + k));
      }
    step(acc, wv, xs, Kp, k, mb, nb);
  }
  if (full < K) {
    for (int j = 0; j < MAXNB; j++)
      if (j < nb) {
        uint16_t tmp[16] = {0};
        memcpy(tmp, w + j * K + full, (size_t)(K - full) * 2);
        wv[j] = _mm256_loadu_si256((const __m256i *)tmp);
      }
    step(acc, wv, xs, Kp, full, mb, nb);
  }
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) {
      float lanes[8];
      _mm256_storeu_ps(lanes, acc[i][j]);
      out[i * ldo + j] = finish(lanes, bias ? bias + j : NULL, resid ? resid + i * ldo + j : NULL);
    }
}

typedef void (*block_fn)(const float *, int64_t, const uint16_t *, int64_t, const uint16_t *, const uint16_t *,
                         uint16_t *, int64_t);
#define BLOCK(MBV, NBV)                                                                                    \
  static void block_##MBV##_##NBV(const float *xs, int64_t Kp, const uint16_t *w, int64_t K,              \
                                  const uint16_t *bias, const uint16_t *resid, uint16_t *out, int64_t ldo) { \
    block(xs, Kp, w, K, bias, resid, out, ldo, MBV, NBV);                                                 \
  }
#define BLOCKS(NBV) BLOCK(1, NBV) BLOCK(2, NBV) BLOCK(3, NBV) BLOCK(4, NBV) BLOCK(5, NBV) BLOCK(6, NBV)
BLOCKS(1) BLOCKS(2) BLOCKS(3) BLOCKS(4)
#define ROW(NBV) {0, block_1_##NBV, block_2_##NBV, block_3_##NBV, block_4_##NBV, block_5_##NBV, block_6_##NBV}
static const block_fn BLOCKS_[MAXNB + 1][MAXMB + 1] = {{0}, ROW(1), ROW(2), ROW(3), ROW(4)};

/* The register block for a pass of M rows (accumulators and split weights fill the 16 registers; the input rows
 * are read from memory by the FMAs): one row against 4 weight rows, 2 or 3 rows against 3, more rows in near-equal
 * blocks of at most 6 against 2 (each split weight then serves 6 rows). */
static void shape(int64_t M, int *rows, int *nbv) {
  if (M <= 3) {
    *rows = (int)M;
    *nbv = M == 1 ? 4 : 3;
  } else {
    int64_t blocks = (M + MAXMB - 1) / MAXMB;
    *rows = (int)((M + blocks - 1) / blocks);
    *nbv = 2;
  }
}

/* ---------------------------------------------------------------- passes of many rows: outer products
 *
 * The same sequence per element, in another arrangement: lane i of an element only ever takes k = 16c + 2i + 1
 * and 16c + 2i, so each lane is a dot product of its own (length Kp / 8), independent of the other lanes. A
 * panel of 16 weight rows is repacked per call so that lane i's pairs of the 16 rows are one 32-bit word each,
 * 16 words a chunk: one 256-bit load of 8 of them, AND and shift, gives the odd and the even k of 8 rows as fp32.
 * The input rows are split into fp32 lane by lane (per lane: odd, even, chunk after chunk); a micro-kernel
 * broadcasts an input value and FMAs it into 6 rows x 16 weight rows of accumulators, one lane at a time. Each
 * lane's accumulator takes fma(w_odd, x_odd), then fma(w_even, x_even), chunk after chunk, padding included:
 * block()'s sequence, so every element has the same bits as there (and as portable.c's). */
#define MR 6   /* input rows per micro-kernel */
#define NR 16  /* weight rows per panel */
#define NC 512 /* weight rows packed at once (shared by the threads) */
#define XS_BYTES (768 * 1024) /* a thread's block of split input rows, kept in L2 */
#define OUTER_MIN 24 /* row counts from here take the outer-product path */

/* Rows of x as fp32 lane by lane: xs[m * Kp + i * 2C + 2c] = x[m, 16c + 2i + 1], + 1: x[m, 16c + 2i]; zeros past K. */
static void split_lanes(const uint16_t *x, int64_t M, int64_t K, int64_t Kp, float *xs) {
  int64_t C = Kp / 16;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *row = x + m * K;
    float *dst = xs + m * Kp;
    for (int64_t i = 0; i < 8; i++)
      for (int64_t c = 0; c < C; c++) {
        int64_t k = 16 * c + 2 * i;
        dst[i * 2 * C + 2 * c] = k + 1 < K ? from_bf16(row[k + 1]) : 0.0f;
        dst[i * 2 * C + 2 * c + 1] = k < K ? from_bf16(row[k]) : 0.0f;
      }
  }
}

/* 8 vectors of 8 words, transposed: r[j] word i becomes r[i] word j. */
static inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
    u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xEE);
    u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
    u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) {
    r[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
    r[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
  }
}

/* Weight rows (nr <= NR of them, K wide) as a panel: wp[(i * C + c) * NR + j] = the word (w[j, 16c + 2i] low,
 * w[j, 16c + 2i + 1] high), C = Kp / 16; zeros past K and for j >= nr. Full chunks of 8 rows by 8 x 8 transposes
 * of words; the rest word by word. */
static void pack_panel(const uint16_t *w, int64_t K, int64_t Kp, int nr, uint32_t *wp) {
  int64_t C = Kp / 16, full = K / 16;
  for (int j0 = 0; j0 < NR; j0 += 8) {
    int64_t c0 = 0;
    if (j0 + 8 <= nr)
      for (; c0 < full; c0++) {
        __m256 r[8];
        for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps((const float *)(w + (j0 + j) * K + 16 * c0));
        transpose8(r);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps((float *)(wp + (i * C + c0) * NR + j0), r[i]);
      }
    for (int j = j0; j < j0 + 8; j++)
      for (int64_t c = c0; c < C; c++)
        for (int64_t i = 0; i < 8; i++) {
          int64_t k = 16 * c + 2 * i;
          uint32_t lo = j < nr && k < K ? w[j * K + k] : 0, hi = j < nr && k + 1 < K ? w[j * K + k + 1] : 0;
          wp[(i * C + c) * NR + j] = lo | hi << 16;
        }
  }
}

/* 8 bf16 as fp32, and 8 fp32 rounded to bf16 as to_bf16() does (nearest even; a NaN stays a quiet NaN). */
static inline __m256 from_bf16x8(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline __m128i to_bf16x8(__m256 f) {
  __m256i u = _mm256_castps_si256(f), top = _mm256_srli_epi32(u, 16);
  __m256i odd = _mm256_and_si256(top, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* finish() for 8 elements whose lanes are 8 vectors (lane i of the 8 elements in l[i]): reduce8's sums, lane-wise. */
static inline void finish8(const __m256 *l, const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  __m256 s0 = _mm256_add_ps(l[0], l[4]), s1 = _mm256_add_ps(l[1], l[5]);
  __m256 s2 = _mm256_add_ps(l[2], l[6]), s3 = _mm256_add_ps(l[3], l[7]);
  __m256 y = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
  if (bias) y = _mm256_add_ps(y, from_bf16x8(bias));
  __m128i r = to_bf16x8(y);
  if (resid) {
    __m256 rf = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(r), 16));
    r = to_bf16x8(_mm256_add_ps(rf, from_bf16x8(resid)));
  }
  _mm_storeu_si128((__m128i *)out, r);
}

/* mb (<= MR) rows of xs against a panel: every lane's accumulators for the 6 x 16 elements, then finish(). */
static inline __attribute__((always_inline)) void micro(const float *xs, int64_t Kp, const uint32_t *wp,
                                                        const uint16_t *bias, const uint16_t *resid, uint16_t *out,
                                                        int64_t ldo, int mb, int nr) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  int64_t C = Kp / 16;
  __m256 lanes[MR][NR / 8][8];
  for (int i = 0; i < 8; i++) {
    __m256 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const uint32_t *wl = wp + i * C * NR;
    const float *xl = xs + i * 2 * C;
    for (int64_t c = 0; c < C; c++) {
      _mm_prefetch((const char *)(wl + (c + 16) * NR), _MM_HINT_T0); /* from L2, a little ahead */
      __m256i w0 = _mm256_loadu_si256((const __m256i *)(wl + c * NR));
      __m256i w1 = _mm256_loadu_si256((const __m256i *)(wl + c * NR + 8));
      __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi)), o1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi));
      for (int r = 0; r < MR; r++)
        if (r < mb) {
          __m256 xo = _mm256_broadcast_ss(xl + r * Kp + 2 * c);
          acc[r][0] = _mm256_fmadd_ps(o0, xo, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(o1, xo, acc[r][1]);
        }
      __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), e1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
      for (int r = 0; r < MR; r++)
        if (r < mb) {
          __m256 xe = _mm256_broadcast_ss(xl + r * Kp + 2 * c + 1);
          acc[r][0] = _mm256_fmadd_ps(e0, xe, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(e1, xe, acc[r][1]);
        }
    }
    for (int r = 0; r < mb; r++) {
      lanes[r][0][i] = acc[r][0];
      lanes[r][1][i] = acc[r][1];
    }
  }
  for (int r = 0; r < mb; r++) {
    if (nr == NR) {
      for (int h = 0; h < NR / 8; h++)
        finish8(lanes[r][h], bias ? bias + 8 * h : NULL, resid ? resid + r * ldo + 8 * h : NULL, out + r * ldo + 8 * h);
      continue;
    }
    for (int j = 0; j < nr; j++) { /* the last panel of an N that is not a multiple of 16 */
      float l[8];
      for (int i = 0; i < 8; i++) l[i] = lanes[r][j / 8][i][j % 8];
      out[r * ldo + j] = finish(l, bias ? bias + j : NULL, resid ? resid + r * ldo + j : NULL);
    }
  }
}

typedef void (*micro_fn)(const float *, int64_t, const uint32_t *, const uint16_t *, const uint16_t *, uint16_t *,
                         int64_t, int);
#define MICRO(MBV)                                                                                               \
  static void micro_##MBV(const float *xs, int64_t Kp, const uint32_t *wp, const uint16_t *bias,                 \
                          const uint16_t *resid, uint16_t *out, int64_t ldo, int nr) {                           \
    micro(xs, Kp, wp, bias, resid, out, ldo, MBV, nr);                                                           \
  }
MICRO(1) MICRO(2) MICRO(3) MICRO(4) MICRO(5) MICRO(6)
static const micro_fn MICROS[MR + 1] = {0, micro_1, micro_2, micro_3, micro_4, micro_5, micro_6};

/* bi_linear for many rows: NC weight rows packed at once, then blocks of input rows (each thread's split rows in
 * its L2) pass the packed panels one after the other. */
static void outer(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                  const uint16_t *resid, uint16_t *out) {
  int64_t Kp = (K + 15) & ~(int64_t)15;
  int64_t mc = XS_BYTES / (Kp * 4) / MR * MR;
  if (mc < MR) mc = MR;
  float *xs = (float *)malloc(sizeof(float) * (size_t)(M * Kp));
  uint32_t *wp = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(NC * Kp / 2));
  split_lanes(x, M, K, Kp, xs);
  int64_t mblocks = (M + mc - 1) / mc;
  for (int64_t n0 = 0; n0 < N; n0 += NC) {
    int64_t nc = N - n0 < NC ? N - n0 : NC, panels = (nc + NR - 1) / NR;
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < panels; p++) {
        int64_t nr = nc - p * NR < NR ? nc - p * NR : NR;
        pack_panel(w + (n0 + p * NR) * K, K, Kp, (int)nr, wp + p * NR * Kp / 2);
      }
      /* Each thread its share of the panels (the same number for every block of rows, whatever M). */
      int64_t parts = omp_get_num_threads();
#pragma omp for schedule(static) collapse(2)
      for (int64_t part = 0; part < parts; part++)
        for (int64_t b = 0; b < mblocks; b++) {
          for (int64_t p = part * panels / parts; p < (part + 1) * panels / parts; p++) {
            int64_t nr = nc - p * NR < NR ? nc - p * NR : NR, n = n0 + p * NR;
            for (int64_t m = b * mc; m < M && m < (b + 1) * mc; m += MR) {
              int mb = M - m < MR ? (int)(M - m) : MR;
              MICROS[mb](xs + m * Kp, Kp, wp + p * NR * Kp / 2, bias ? bias + n : NULL, resid ? resid + m * N + n : NULL,
                         out + m * N + n, N, (int)nr);
            }
          }
        }
    }
  }
  free(xs);
  free(wp);
}

/* As portable.c's bi_linear (its definition: bi_linear_ref there); every block computes each element by block(). */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
  if (M >= OUTER_MIN) {
    outer(x, M, K, w, N, bias, resid, out);
    return;
  }
  int rows, nbv;
  shape(M, &rows, &nbv);
  int64_t Kp = (K + 15) & ~(int64_t)15, nblocks = (N + nbv - 1) / nbv;
  int64_t cap = M < MC ? M : MC;
  float small[4 * 4096], *xs = cap * Kp <= 4 * 4096 ? small : (float *)malloc(sizeof(float) * (size_t)(cap * Kp));
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    int64_t mc = M - m0 < MC ? M - m0 : MC;
    split_rows(x + m0 * K, mc, K, Kp, xs);
    /* A group of GROUP weight blocks stays in L2 while every block of rows passes it (the rows' split inputs, read
     * by every FMA, then come from L1 where they fit), instead of each weight block passing all the rows. */
    int64_t groups = (nblocks + GROUP - 1) / GROUP;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; g++)
      for (int64_t m = 0; m < mc; m += rows) {
        int mb = mc - m < rows ? (int)(mc - m) : rows;
        for (int64_t b = g * GROUP; b < nblocks && b < (g + 1) * GROUP; b++) {
          int64_t n0 = b * nbv;
          int nb = N - n0 < nbv ? (int)(N - n0) : nbv;
          BLOCKS_[nb][mb](xs + m * Kp, Kp, w + n0 * K, K, bias ? bias + n0 : NULL,
                          resid ? resid + (m0 + m) * N + n0 : NULL, out + (m0 + m) * N + n0, N);
        }
      }
  }
  if (xs != small) free(xs);
}

/* The int8 linear: x quantised per row as portable.c does, centred to int16 (xq - 128, so the sums need no row
 * sums), against 16 int8 weights sign-extended to int16 per vpmaddwd. Blocks of 4 weight rows, 1 or 2 input rows. */
void bi_linear_i8(const uint16_t *x, int64_t M, int64_t K, const int8_t *w, int64_t N, const float *sw,
                  const int32_t *rowsum, const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  (void)rowsum;
  int64_t Kp = (K + 63) & ~(int64_t)63;
  uint8_t *xq = (uint8_t *)malloc((size_t)(M * Kp));
  int16_t *xc = (int16_t *)malloc(sizeof(int16_t) * (size_t)(M * Kp));
  float *sx = (float *)malloc(sizeof(float) * (size_t)M);
  bi_quantize_rows(x, M, K, Kp, xq, sx);
  for (int64_t i = 0; i < M * Kp; i++) xc[i] = (int16_t)((int)xq[i] - 128);
  int64_t nblocks = (N + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblocks; b++) {
    int64_t n0 = 4 * b;
    int nb = N - n0 < 4 ? (int)(N - n0) : 4;
    for (int64_t m = 0; m < M; m += 2) {
      int mb = M - m < 2 ? 1 : 2;
      __m256i acc[2][4];
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_si256();
      for (int64_t k = 0; k < K; k += 16) {
        __m256i wv[4];
        for (int j = 0; j < nb; j++) {
          const int8_t *src = w + (n0 + j) * K + k;
          int8_t tmp[16] = {0};
          if (k + 16 > K) {
            memcpy(tmp, src, (size_t)(K - k));
            src = tmp;
          } else {
            _mm_prefetch((const char *)(src + AHEAD * 4 * K), _MM_HINT_T1);
          }
          wv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)src));
        }
        for (int i = 0; i < mb; i++) {
          __m256i xv = _mm256_loadu_si256((const __m256i *)(xc + (m + i) * Kp + k));
          for (int j = 0; j < nb; j++) acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(xv, wv[j]));
        }
      }
      for (int i = 0; i < mb; i++)
        for (int j = 0; j < nb; j++) {
          int32_t l[8], s = 0;
          _mm256_storeu_si256((__m256i *)l, acc[i][j]);
          for (int t = 0; t < 8; t++) s += l[t];
          int64_t n = n0 + j;
          out[(m + i) * N + n] = finish_i8(s, sx[m + i], sw[n], bias ? bias + n : NULL,
                                           resid ? resid + (m + i) * N + n : NULL);
        }
    }
  }
  free(xq);
  free(xc);
  free(sx);
}

/* mb input rows (1 or 2) against nb weight rows (at most 4) from row n0, input row m: each element's lanes by the
 * sequence above. Inlined with constant mb and nb, the loops unroll and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void block_i4(const int8_t *xs, const int32_t *nc, int64_t Kp,
                                                           const uint8_t *w, const uint16_t *s, int64_t S, int64_t G,
                                                           const float *sx, const uint16_t *bias,
                                                           const uint16_t *resid, uint16_t *out, int64_t N, int64_t m,
                                                           int64_t n0, int mb, int nb) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t ldw = Kp / 2;
  __m256 acc[2][4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < Kp; k0 += 128) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      if (j >= nb) break;
      const uint8_t *wr = w + (n0 + j) * ldw + k0 / 2;
      _mm_prefetch((const char *)(wr + AHEAD * 4 * ldw), _MM_HINT_T1);
      __m256i v0 = _mm256_loadu_si256((const __m256i *)wr), v1 = _mm256_loadu_si256((const __m256i *)(wr + 32));
      __m256i wv[4] = {_mm256_and_si256(v0, low), _mm256_and_si256(v1, low),
                       _mm256_and_si256(_mm256_srli_epi16(v0, 4), low), _mm256_and_si256(_mm256_srli_epi16(v1, 4), low)};
#pragma GCC unroll 4
      for (int t = 0; t < 4; t++) {
        int64_t k = k0 + 32 * t;
        __m256 sc = _mm256_set1_ps(scale_i4(s + (n0 + j) * S, k, G));
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
          if (i >= mb) break;
          __m256i xv = _mm256_loadu_si256((const __m256i *)(xs + (m + i) * Kp + k));
          __m256i start = _mm256_loadu_si256((const __m256i *)(nc + ((m + i) * Kp + k) / 4));
          __m256i sum = _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(wv[t], xv), ones));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), sc, acc[i][j]);
        }
      }
    }
  }
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) {
      float lanes[8];
      _mm256_storeu_ps(lanes, acc[i][j]);
      int64_t n = n0 + j;
      out[(m + i) * N + n] = finish_i4(lanes, sx[m + i], bias ? bias + n : NULL, resid ? resid + (m + i) * N + n : NULL);
    }
}

static void block_i4_1x4(const int8_t *xs, const int32_t *nc, int64_t Kp, const uint8_t *w, const uint16_t *s,
                         int64_t S, int64_t G, const float *sx, const uint16_t *bias, const uint16_t *resid,
                         uint16_t *out, int64_t N, int64_t m, int64_t n0) {
  block_i4(xs, nc, Kp, w, s, S, G, sx, bias, resid, out, N, m, n0, 1, 4);
}

static void block_i4_2x4(const int8_t *xs, const int32_t *nc, int64_t Kp, const uint8_t *w, const uint16_t *s,
                         int64_t S, int64_t G, const float *sx, const uint16_t *bias, const uint16_t *resid,
                         uint16_t *out, int64_t N, int64_t m, int64_t n0) {
  block_i4(xs, nc, Kp, w, s, S, G, sx, bias, resid, out, N, m, n0, 2, 4);
}

/* The int4 linear: portable.c's definition (8 fp32 lanes; per 32 k in increasing order, each lane's exact integer
 * sum of 4 products times the group's scale), the integer sums by vpmaddubsw (nibble * int8, pairs: at most
 * 2 * 15 * 127, no saturation) and vpmaddwd against ones, started at -8 times the sum of the lane's x. A chunk of
 * 128 k is two 32-byte loads; the 32 k of each half is an AND, or a shift and an AND. Blocks of 4 weight rows,
 * 1 or 2 input rows (block_i4; full blocks through its unrolled copies). */
void bi_linear_i4(const uint16_t *x, int64_t M, int64_t K, const uint8_t *w, int64_t N, const uint16_t *s, int64_t G,
                  const uint16_t *bias, const uint16_t *resid, uint16_t *out) {
  int64_t Kp = (K + 127) & ~(int64_t)127, S = (Kp + G - 1) / G;
  int8_t *xs = (int8_t *)malloc((size_t)(M * Kp));
  int32_t *nc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(M * Kp / 4));
  float *sx = (float *)malloc(sizeof(float) * (size_t)M);
  quantize_rows_i4(x, M, K, Kp, xs, nc, sx);
  int64_t nblocks = (N + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nblocks; b++) {
    int64_t n0 = 4 * b;
    int nb = N - n0 < 4 ? (int)(N - n0) : 4;
    for (int64_t m = 0; m < M; m += 2) {
      int mb = M - m < 2 ? 1 : 2;
      if (nb == 4 && mb == 1)
        block_i4_1x4(xs, nc, Kp, w, s, S, G, sx, bias, resid, out, N, m, n0);
      else if (nb == 4)
        block_i4_2x4(xs, nc, Kp, w, s, S, G, sx, bias, resid, out, N, m, n0);
      else
        block_i4(xs, nc, Kp, w, s, S, G, sx, bias, resid, out, N, m, n0, mb, nb);
    }
  }
  free(xs);
  free(nc);
  free(sx);
}

/* portable.c's bi_silu_mul, 8 elements at a time by the same operations (exp8), the rest one by one. */
void bi_silu_mul(const uint16_t *gu, int64_t M, int64_t I, uint16_t *out) {
#pragma omp parallel for schedule(static) if (M * I > 65536)
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *g = gu + m * 2 * I, *u = g + I;
    int64_t i = 0;
    for (; i + 8 <= I; i += 8) {
      __m256 gv = from_bf16x8(g + i), e = exp8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
      __m256 y = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), from_bf16x8(u + i));
      _mm_storeu_si128((__m128i *)(out + m * I + i), to_bf16x8(y));
    }
    for (; i < I; i++) {
      float gf = from_bf16(g[i]);
      out[m * I + i] = to_bf16((gf / (1.0f + exp_clamped(-gf))) * from_bf16(u[i]));
    }
  }
}
