/* Batch-invariant kernels for x86-64 CPUs with AVX2 and FMA (Intel since Haswell, AMD since Zen), which lack
 * AVX512-BF16: portable.c's definitions, with the linears written in AVX2 so that a one-token step streams its
 * weights at the memory's pace and a prefill keeps both FMA ports busy.
 *
 * The bf16 linear: a chunk of 16 bf16 weights is one 256-bit load; AND with 0xFFFF0000 gives the odd elements
 * as fp32, a shift left by 16 the even ones (exact). The input rows are split the same way once per call. Lane
 * i then takes fma(w[2i + 1], x[2i + 1], acc), then fma(w[2i], x[2i], acc), chunk after chunk: portable.c's
 * chunk(), in the same order; the epilogue is its finish(). Every register block computes each element by that
 * one sequence, so a row's bits never depend on the pass.
 * The int8 linear: integer sums are exact in any order (vpmaddwd on int16, no saturation), and the epilogue is
 * portable.c's finish_i8().
 */
#define BI_OWN_LINEARS
#include "portable.c"

#include <immintrin.h>

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

/* As portable.c's bi_linear (its definition: bi_linear_ref there); every block computes each element by block(). */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
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
