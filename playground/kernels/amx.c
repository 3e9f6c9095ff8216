/* Batch-invariant bf16 kernels for Intel Xeons with AMX (Sapphire Rapids and later): avx512.c for everything
 * (attention, the int8 and int4 drafts' VNNI linears; the norms, rotary and SiLU are portable.c's, which avx512.c
 * includes), with the bf16 linear in the tiles' arithmetic.
 *
 * The tiles' arithmetic (tdpbf16ps, checked against real tiles: tests/data/amx/README.md): per instruction and
 * element of C, an even and an odd float32 sum start at zero and add the 16 products of their parity in order of k,
 * each addition rounded to nearest even, the products exact; then C = C + (even + odd), rounded; inputs and
 * results below float32's normal range are zero (DAZ, FTZ). tile_dp_exact below writes it out in plain C.
 *
 * The linear computes out^T = w x^T, so that the weights need no repacking: an A tile is 16 weight rows x 32 bf16
 * of K, loaded straight from the row-major (N, K) weight (stride 2K bytes); a B tile is 16 input rows x 32 bf16 of
 * K in VNNI pairs (B[kp][2j + e] = x[j][2kp + e]), repacked once per call; a C tile is 16 weight rows x 16 input
 * rows in fp32. Every C element starts at zero and takes one tdpbf16ps per chunk of 32 along K, chunk 0 first;
 * inputs beyond M and K are zeros. So an element is a function of its weight row and its input row alone,
 * whatever the number of rows in the pass, the blocking or the thread. The epilogue is avx512.c's: + bias,
 * round to bf16, + residual, round again.
 *
 * A one-row pass (the one-token step) runs no tiles: linear_vec computes the same arithmetic with AVX512 lanes across
 * 16 weight rows (their 64-byte pieces of a chunk transposed in registers, so it reads the same row-major weight),
 * at avx512's memory speed and bit for bit the tiles' result. TILE_ORDER_VECTOR builds every pass on linear_vec (the
 * tiles' order on a CPU without AMX); AMX_EMULATE replaces the tile instructions with plain C (tile_dp_lanes:
 * tile_dp_exact's arithmetic on AVX512 lanes), so that a machine without AMX computes exactly what the tiles compute.
 */
#define bi_linear bi_linear_avx512 /* avx512.c's linear: the fallback where the kernel refuses the tiles */
#define bi_linear_ref bi_linear_ref_avx512
#define BI_STEP_AFTER /* step.c after this file's bi_linear, so that bi_model_step calls it */
#include "avx512.c"
#undef bi_linear
#undef bi_linear_ref

#include <float.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Bytes of weight rows one thread keeps in L2 while the blocks of input rows pass them (prefill). */
#define ROWS_BUDGET (1200 * 1024)
/* In a pass of at most 32 rows, blocks of 32 weight rows are prefetched this many blocks ahead into L2. */
#define TAHEAD 2
/* Passes of at most this many rows run on linear_vec, more on the tiles (the same bits either way). */
#define VEC_ROWS 1

static inline float daz(float f) { return fabsf(f) < FLT_MIN ? 0.0f : f; }

/* One value rounded as the epilogue's vcvtneps2bf16 rounds it: to nearest even, an input below float32's normal
 * range to zero (portable.c's to_bf16 rounds it to a bf16 subnormal instead). */
static inline uint16_t to_bf16_cvt(float f) {
  __m256bh h = _mm512_cvtneps_pbh(_mm512_set1_ps(f));
  return (uint16_t)_mm256_extract_epi16((__m256i)h, 0);
}

/* One tdpbf16ps as the hardware computes it: C (16 x 16 fp32) += A (16 x 32 bf16) B (16 pairs x 16 x 2 bf16). */
static void tile_dp_exact(float *C, const uint16_t *A, const uint16_t *B) {
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 16; n++) {
      float sum[2] = {0.0f, 0.0f};
      for (int e = 0; e < 2; e++)
        for (int k = 0; k < 16; k++)
          sum[e] = daz(fmaf(daz(from_bf16(A[32 * m + 2 * k + e])), daz(from_bf16(B[32 * k + 2 * n + e])), sum[e]));
      C[16 * m + n] = daz(daz(C[16 * m + n]) + daz(sum[0] + sum[1]));
    }
}

#if defined(AMX_EMULATE) || defined(TILE_ORDER_VECTOR)
static __thread uint8_t emu[8][1024];
#define T_CONFIG() (void)0
#define T_RELEASE() (void)0
#define T_ZERO(t) memset(emu[t], 0, 1024)
#define T_LOAD(t, p, s) \
  for (int r_ = 0; r_ < 16; r_++) memcpy(emu[t] + 64 * r_, (const char *)(p) + r_ * (s), 64)
#define T_STORE(t, p, s) \
  for (int r_ = 0; r_ < 16; r_++) memcpy((char *)(p) + r_ * (s), emu[t] + 64 * r_, 64)
#define T_DP(c, a, b) tile_dp_lanes((float *)emu[c], (const uint16_t *)emu[a], (const uint16_t *)emu[b])
/* tile_dp_exact's arithmetic on AVX512 lanes (lane n: column n of C; B's rows are already the pairs of 16 columns),
 * under MXCSR's DAZ and FTZ: the emulated passes then take a small multiple of the real tiles' time. */
static void tile_dp_lanes(float *C, const uint16_t *A, const uint16_t *B) {
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int m = 0; m < 16; m++) {
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    for (int kp = 0; kp < 16; kp++) {
      __m512i p = _mm512_loadu_si512((const void *)(B + 32 * kp));
      even = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(p, 16)), _mm512_set1_ps(from_bf16(A[32 * m + 2 * kp])), even);
      odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(p, hi)), _mm512_set1_ps(from_bf16(A[32 * m + 2 * kp + 1])), odd);
    }
    _mm512_storeu_ps(C + 16 * m, _mm512_add_ps(_mm512_loadu_ps(C + 16 * m), _mm512_add_ps(even, odd)));
  }
  _mm_setcsr(csr);
}
#else
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) tile_config;
static inline void T_CONFIG(void) { /* palette 1, tiles 0-7: 16 rows x 64 bytes each */
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}
#define T_RELEASE() _tile_release()
#define T_ZERO(t) _tile_zero(t)
#define T_LOAD(t, p, s) _tile_loadd(t, p, s)
#define T_STORE(t, p, s) _tile_stored(t, p, s)
#define T_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

/* Linux grants the tiles' state to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
 * 1 when granted: build.py loads the variant only then. */
static int amx_state = 0;
int bi_kernel_ready(void) {
  if (amx_state == 0) {
#if defined(AMX_EMULATE) || defined(TILE_ORDER_VECTOR)
    amx_state = 1;
#else
    amx_state = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
#endif
  }
  return amx_state == 1;
}

/* r[i][j] -> r[j][i] for 16 x 16 32-bit lanes: in-lane unpacks, then 128-bit shuffles, all with constant patterns
 * (the one-row pass's time is mostly this; docs/exactness.md has its cost against avx512's). */
static inline __attribute__((always_inline)) void transpose16(__m512 *r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) { /* 2 x 2 blocks of lanes */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) /* 4 x 4 blocks within each 128-bit lane */
    for (int j = 0; j < 2; j++) {
      __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  for (int i = 0; i < 16; i += 8) /* 128-bit lanes across rows i..i+7: 0x88 takes lanes 0 and 2, 0xdd lanes 1 and 3 */
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

/* The inputs as B tiles: xp[((t * KC + c) * 16 + kp) * 32 + 2j + e] = x[16t + j][32c + 2kp + e], zeros beyond M, K. */
static void pack_x(const uint16_t *x, int64_t M, int64_t K, int64_t KC, uint16_t *xp) {
  int64_t MT = (M + 15) / 16;
#pragma omp parallel for schedule(static) if (M * K > 65536)
  for (int64_t i = 0; i < MT * KC; i++) {
    int64_t t = i / KC, c = i % KC;
    __m512 r[16];
    for (int j = 0; j < 16; j++) {
      int64_t m = 16 * t + j;
      r[j] = m < M ? _mm512_castsi512_ps((__m512i)load_bf16(x + m * K + 32 * c, K - 32 * c)) : _mm512_setzero_ps();
    }
    transpose16(r);
    for (int kp = 0; kp < 16; kp++) _mm512_store_ps((float *)(xp + i * 512 + kp * 32), r[kp]);
  }
}

/* Where the A tiles come from: the weight itself (full tiles, full chunks), a padded copy of the last 16 weight
 * rows when N is not a multiple of 16 (`pad`, 16 x 32KC), a padded copy of every row's last chunk when K is not a
 * multiple of 32 (`tail`, 32 bf16 a row). */
typedef struct {
  const uint16_t *w, *pad, *tail;
  int64_t K, KC, KF, padn0;
} wsrc;

static inline const uint16_t *a_tile(const wsrc *s, int64_t n0, int64_t c, int64_t *stride) {
  if (n0 == s->padn0) return *stride = s->KC * 64, s->pad + 32 * c;
  if (c < s->KF) return *stride = s->K * 2, s->w + n0 * s->K + 32 * c;
  return *stride = 64, s->tail + n0 * 32;
}

/* C tiles for weight rows n0.. (nn tiles of 16) x input rows 16 mt0.. (nm tiles of 16), over every chunk of K in
 * order, into cbuf (tile (i, j) at 256 (2j + i), [weight row][input row]). pf: the weight block to prefetch into
 * L2 alongside, pfl lines a chunk. */
static inline __attribute__((always_inline)) void tiles(const wsrc *s, int64_t n0, int nn, const uint16_t *xp,
                                                        int64_t mt0, int nm, const char *pf, int pfl, float *cbuf) {
  int64_t KC = s->KC, sa0, sa1;
  T_ZERO(0);
  if (nn == 2) T_ZERO(1);
  if (nm == 2) T_ZERO(2);
  if (nn == 2 && nm == 2) T_ZERO(3);
  const uint16_t *b0 = xp + mt0 * KC * 512, *b1 = b0 + KC * 512;
  for (int64_t c = 0; c < KC; c++) {
    const uint16_t *a0 = a_tile(s, n0, c, &sa0);
    T_LOAD(4, a0, sa0);
    T_LOAD(6, b0 + c * 512, 64);
    T_DP(0, 4, 6);
    if (nn == 2) {
      const uint16_t *a1 = a_tile(s, n0 + 16, c, &sa1);
      T_LOAD(5, a1, sa1);
      T_DP(1, 5, 6);
    }
    if (nm == 2) {
      T_LOAD(7, b1 + c * 512, 64);
      T_DP(2, 4, 7);
      if (nn == 2) T_DP(3, 5, 7);
    }
    if (pf)
      for (int l = 0; l < pfl; l++) _mm_prefetch(pf + (c * pfl + l) * 64, _MM_HINT_T1);
  }
  T_STORE(0, cbuf, 64);
  if (nn == 2) T_STORE(1, cbuf + 256, 64);
  if (nm == 2) T_STORE(2, cbuf + 512, 64);
  if (nn == 2 && nm == 2) T_STORE(3, cbuf + 768, 64);
}

#define TILES(NN, NM)                                                                                            \
  static void tiles_##NN##_##NM(const wsrc *s, int64_t n0, const uint16_t *xp, int64_t mt0, const char *pf, int pfl, \
                                float *cbuf) {                                                                   \
    tiles(s, n0, NN, xp, mt0, NM, pf, pfl, cbuf);                                                                \
  }
TILES(1, 1) TILES(1, 2) TILES(2, 1) TILES(2, 2)

/* One C tile (weight rows n0.., input rows m0..) to out: transposed, + bias, rounded, + residual, rounded. */
static void finish_tile(const float *cbuf, int64_t m0, int64_t M, int64_t n0, int64_t N, const uint16_t *bias,
                   const uint16_t *resid, uint16_t *out) {
  __m512 r[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(cbuf + 16 * i);
  transpose16(r);
  int nv = N - n0 < 16 ? (int)(N - n0) : 16;
  __mmask16 cols = (__mmask16)((1u << nv) - 1u);
  __m512 b = bias ? widen((__m256bh)_mm256_maskz_loadu_epi16(cols, bias + n0)) : _mm512_setzero_ps();
  for (int j = 0; j < 16 && m0 + j < M; j++) {
    __m256bh v = _mm512_cvtneps_pbh(_mm512_add_ps(r[j], b));
    if (resid)
      v = _mm512_cvtneps_pbh(_mm512_add_ps(widen(v), widen((__m256bh)_mm256_maskz_loadu_epi16(cols, resid + (m0 + j) * N + n0))));
    _mm256_mask_storeu_epi16(out + (m0 + j) * N + n0, cols, (__m256i)v);
  }
}

/* Weight blocks b0..b1 (32 rows each) against every input row: block of 32 input rows by block of 32 input rows,
 * each passing all the group's weight blocks (kept in L2 from the first pass, which prefetches them). */
static void group(const wsrc *s, int64_t b0, int64_t b1, int64_t nblocks, int64_t ahead, int64_t M, int64_t N,
                  const uint16_t *xp, const uint16_t *bias, const uint16_t *resid, uint16_t *out, float *cbuf) {
  int64_t MT = (M + 15) / 16;
  int pfl = (int)((s->K + s->KC - 1) / s->KC); /* 32 rows x K bf16 = K lines, spread over the KC chunks */
  for (int64_t mt0 = 0; mt0 < MT; mt0 += 2) {
    int nm = MT - mt0 >= 2 ? 2 : 1;
    for (int64_t b = b0; b < b1; b++) {
      int64_t n0 = 32 * b, pb = b + ahead;
      int nn = n0 + 16 < N ? 2 : 1;
      const char *pf = mt0 == 0 && pb < nblocks && 32 * pb + 32 <= N ? (const char *)(s->w + 32 * pb * s->K) : NULL;
      if (nn == 2) (nm == 2 ? tiles_2_2 : tiles_2_1)(s, n0, xp, mt0, pf, pfl, cbuf);
      else (nm == 2 ? tiles_1_2 : tiles_1_1)(s, n0, xp, mt0, pf, pfl, cbuf);
      for (int i = 0; i < nn; i++)
        for (int j = 0; j < nm; j++)
          finish_tile(cbuf + 256 * (2 * j + i), 16 * (mt0 + j), M, n0 + 16 * i, N, bias, resid, out);
    }
  }
}

/* bi_linear's pass on the tiles (the arguments as bi_linear's). */
static void linear_tiles(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                         const uint16_t *resid, uint16_t *out) {
  int64_t KC = (K + 31) / 32, MT = (M + 15) / 16, nblocks = (N + 31) / 32;
  wsrc s = {w, NULL, NULL, K, KC, K / 32, N % 16 ? N - N % 16 : -1};
  uint16_t *xp = aligned_alloc(64, (size_t)(MT * KC * 1024));
  uint16_t *pad = NULL, *tail = NULL;
  pack_x(x, M, K, KC, xp);
  if (s.padn0 >= 0) { /* the last weight rows, zero-padded to a tile of 16 x 32KC */
    pad = calloc(16 * KC * 32, 2);
    for (int64_t n = s.padn0; n < N; n++) memcpy(pad + (n - s.padn0) * KC * 32, w + n * K, K * 2);
    s.pad = pad;
  }
  if (K % 32) { /* every row's last chunk, zero-padded to 32 */
    tail = calloc((size_t)(N * 32), 2);
    for (int64_t n = 0; n < N; n++) memcpy(tail + n * 32, w + n * K + 32 * s.KF, (K % 32) * 2);
    s.tail = tail;
  }
  int threads = omp_get_max_threads();
  int64_t per = 1; /* weight blocks a group: 1 for a pass of at most 32 rows, else as many as L2 holds */
  if (M > 32) {
    per = ROWS_BUDGET / (64 * K);
    if (per > nblocks / threads) per = nblocks / threads;
    if (per < 1) per = 1;
  }
  int64_t groups = (nblocks + per - 1) / per;
#pragma omp parallel
  {
    float cbuf[1024] __attribute__((aligned(64)));
    T_CONFIG();
    if (per == 1) { /* contiguous blocks a thread, each prefetching TAHEAD blocks ahead */
#pragma omp for schedule(static)
      for (int64_t g = 0; g < groups; g++) group(&s, g, g + 1, nblocks, TAHEAD, M, N, xp, bias, resid, out, cbuf);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < groups; g++) {
        int64_t b1 = (g + 1) * per < nblocks ? (g + 1) * per : nblocks;
        group(&s, g * per, b1, nblocks, 1, M, N, xp, bias, resid, out, cbuf);
      }
    }
    T_RELEASE();
  }
  free(xp);
  free(pad);
  free(tail);
}

/* ------------------------------------------------------------------------------------------------
 * The tiles' arithmetic on AVX512 lanes: lane n of a vector is weight row n0 + n. Per chunk of 32 along K, the 16
 * rows' 64-byte pieces are transposed in registers (lane n of r[kp] = the pair w[n][32c + 2kp], w[n][32c + 2kp + 1]),
 * the even and odd sums start at zero and take their 16 products in order of kp (one fused multiply-add each: the
 * product is exact, the addition rounded once), then acc += even + odd: tile_dp_exact's sequence for every element,
 * with MXCSR's DAZ and FTZ for the tiles' treatment of values below the normal range. */

#define VMB 4   /* input rows per register block */
#define VMC 128 /* input rows per cache block: the weight block is read from memory once per VMC rows */
#define MXCSR_DAZ_FTZ 0x8040

/* x rows as fp32 (the bf16 values, exactly), zeros beyond K up to 32 KC. */
static void widen_rows(const uint16_t *x, int64_t M, int64_t K, int64_t KC, float *xf) {
  for (int64_t m = 0; m < M; m++) {
    for (int64_t k = 0; k < K; k++) xf[m * KC * 32 + k] = from_bf16(x[m * K + k]);
    for (int64_t k = K; k < KC * 32; k++) xf[m * KC * 32 + k] = 0.0f;
  }
}

/* mb input rows (xf, KC * 32 floats each) against the nv weight rows at w: acc[i] lane n = row i against row n. */
static inline __attribute__((always_inline)) void vec_block(const float *xf, int64_t KC, const uint16_t *w, int64_t K,
                                                            int nv, int mb, int pf, __m512 *acc) {
  for (int i = 0; i < VMB; i++) acc[i] = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int64_t c = 0; c < KC; c++) {
    __m512 r[16];
    for (int j = 0; j < 16; j++) {
      if (pf) _mm_prefetch((const char *)(w + (j + 16 * TAHEAD) * K + 32 * c), _MM_HINT_T1);
      r[j] = j < nv ? _mm512_castsi512_ps((__m512i)load_bf16(w + j * K + 32 * c, K - 32 * c)) : _mm512_setzero_ps();
    }
    transpose16(r);
    __m512 even[VMB], odd[VMB];
    for (int i = 0; i < VMB; i++) even[i] = odd[i] = _mm512_setzero_ps();
    for (int kp = 0; kp < 16; kp++) {
      __m512i p = _mm512_castps_si512(r[kp]);
      __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(p, hi));
      for (int i = 0; i < VMB; i++)
        if (i < mb) {
          const float *xc = xf + i * KC * 32 + 32 * c + 2 * kp;
          even[i] = _mm512_fmadd_ps(we, _mm512_set1_ps(xc[0]), even[i]);
          odd[i] = _mm512_fmadd_ps(wo, _mm512_set1_ps(xc[1]), odd[i]);
        }
    }
    for (int i = 0; i < VMB; i++)
      if (i < mb) acc[i] = _mm512_add_ps(acc[i], _mm512_add_ps(even[i], odd[i]));
  }
}

#define VEC(MBV)                                                                                                     \
  static void vec_block_##MBV(const float *xf, int64_t KC, const uint16_t *w, int64_t K, int nv, int pf, __m512 *acc) { \
    vec_block(xf, KC, w, K, nv, MBV, pf, acc);                                                                       \
  }
VEC(1) VEC(2) VEC(3) VEC(4)
static void (*const VEC_[VMB + 1])(const float *, int64_t, const uint16_t *, int64_t, int, int, __m512 *) = {
    0, vec_block_1, vec_block_2, vec_block_3, vec_block_4};

/* bi_linear's pass on AVX512 lanes (the arguments as bi_linear's): every element bitwise the tiles'. */
static void linear_vec(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                       const uint16_t *resid, uint16_t *out) {
  int64_t KC = (K + 31) / 32, nblocks = (N + 15) / 16, rows = M < VMC ? M : VMC;
  float small[4096], *xf = rows * KC * 32 <= 4096 ? small : aligned_alloc(64, (size_t)(rows * KC * 128));
  for (int64_t m0 = 0; m0 < M; m0 += VMC) {
    int64_t mc = M - m0 < VMC ? M - m0 : VMC;
    widen_rows(x + m0 * K, mc, K, KC, xf);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
      int64_t n0 = 16 * b;
      int nv = N - n0 < 16 ? (int)(N - n0) : 16;
      __mmask16 cols = (__mmask16)((1u << nv) - 1u);
      __m512 bv = bias ? widen((__m256bh)_mm256_maskz_loadu_epi16(cols, bias + n0)) : _mm512_setzero_ps();
      int pf = 16 * (b + TAHEAD) + 16 <= N;
      for (int64_t m = m0; m < m0 + mc; m += VMB) {
        int mb = m0 + mc - m < VMB ? (int)(m0 + mc - m) : VMB;
        __m512 acc[VMB];
        unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | MXCSR_DAZ_FTZ);
        VEC_[mb](xf + (m - m0) * KC * 32, KC, w + n0 * K, K, nv, pf && m == m0, acc);
        _mm_setcsr(csr); /* the epilogue as finish_tile()'s, outside DAZ and FTZ */
        for (int i = 0; i < mb; i++) {
          __m256bh v = _mm512_cvtneps_pbh(_mm512_add_ps(acc[i], bv));
          if (resid)
            v = _mm512_cvtneps_pbh(_mm512_add_ps(widen(v), widen((__m256bh)_mm256_maskz_loadu_epi16(cols, resid + (m + i) * N + n0))));
          _mm256_mask_storeu_epi16(out + (m + i) * N + n0, cols, (__m256i)v);
        }
      }
    }
  }
  if (xf != small) free(xf);
}

/* x: (M, K), w: (N, K), bias: (N,) or NULL, resid: (M, N) or NULL (added to the result), out: (M, N); all bf16,
 * row-major, contiguous. Every element as the header says, whatever M: a one-row pass on AVX512 lanes, more rows
 * on the tiles (TILE_ORDER_VECTOR: every pass on the lanes). */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
  if (M <= 0 || N <= 0) return;
  if (!bi_kernel_ready()) {
    bi_linear_avx512(x, M, K, w, N, bias, resid, out);
    return;
  }
#ifndef TILE_ORDER_VECTOR
  if (M > VEC_ROWS) {
    linear_tiles(x, M, K, w, N, bias, resid, out);
    return;
  }
#endif
  linear_vec(x, M, K, w, N, bias, resid, out);
}

/* One element by the tiles' arithmetic, written out (tile_dp_exact's, zeros beyond K): the sum of x . w. */
static float dot_exact(const uint16_t *x, const uint16_t *w, int64_t K) {
  float acc = 0.0f;
  for (int64_t c = 0; c < K; c += 32) {
    float sum[2] = {0.0f, 0.0f};
    for (int64_t k = c; k < c + 32; k++) {
      float a = k < K ? daz(from_bf16(x[k])) : 0.0f, b = k < K ? daz(from_bf16(w[k])) : 0.0f;
      sum[k % 2] = daz(fmaf(a, b, sum[k % 2]));
    }
    acc = daz(acc + daz(sum[0] + sum[1]));
  }
  return acc;
}

/* The definition, one element at a time: dot_exact, + bias, rounded to bf16, + residual, rounded again (tests
 * compare bi_linear with it, bitwise: on an AMX CPU, the real tiles against the model). */
void bi_linear_ref(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                   const uint16_t *resid, uint16_t *out) {
  if (!bi_kernel_ready()) {
    bi_linear_ref_avx512(x, M, K, w, N, bias, resid, out);
    return;
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      uint16_t v = to_bf16_cvt(dot_exact(x + m * K, w + n * K, K) + (bias ? from_bf16(bias[n]) : 0.0f));
      out[m * N + n] = resid ? to_bf16_cvt(from_bf16(v) + from_bf16(resid[m * N + n])) : v;
    }
}

/* One tdpbf16ps on the tiles (emulated: tile_dp_exact): C (16 x 16 fp32) += A (16 x 32 bf16) B (16 x 32 bf16, the
 * pairs as the instruction reads them). tests/test_kernels_amx.py runs it on the recorded cases. */
void bi_tile_dp(float *C, const uint16_t *A, const uint16_t *B) {
  if (!bi_kernel_ready()) return;
  T_CONFIG();
  T_LOAD(0, C, 64);
  T_LOAD(4, A, 64);
  T_LOAD(6, B, 64);
  T_DP(0, 4, 6);
  T_STORE(0, C, 64);
  T_RELEASE();
}

/* The same instruction by the exact model written out element by element (bi_kernel_check's reference). */
void bi_tile_dp_exact(float *C, const uint16_t *A, const uint16_t *B) { tile_dp_exact(C, A, B); }

/* The same instruction by linear_vec's arithmetic: A's rows as input rows, B's pairs as 16 weight rows of 32. */
void bi_tile_dp_vec(float *C, const uint16_t *A, const uint16_t *B) {
  uint16_t w[16 * 32];
  float xf[16 * 32];
  for (int n = 0; n < 16; n++)
    for (int k = 0; k < 32; k++) w[32 * n + k] = B[32 * (k / 2) + 2 * n + k % 2];
  widen_rows(A, 16, 32, 1, xf);
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | MXCSR_DAZ_FTZ);
  for (int m0 = 0; m0 < 16; m0 += VMB) {
    __m512 acc[VMB];
    vec_block_4(xf + 32 * m0, 1, w, 32, 16, 0, acc);
    for (int i = 0; i < VMB; i++) _mm512_storeu_ps(C + 16 * (m0 + i), _mm512_add_ps(_mm512_loadu_ps(C + 16 * (m0 + i)), acc[i]));
  }
  _mm_setcsr(csr);
}

/* The start-up check (build.py loads the variant only when it passes): the tiles against tile_dp_exact on values of
 * every scale (tiny ones included), and the one-row lanes against the tiles on shapes with remainders of N and K. */
int bi_kernel_check(void) {
  if (!bi_kernel_ready()) return 0;
  uint64_t st = 0x9E3779B97F4A7C15ull;
  uint16_t *a = malloc(2 * 100 * 80), *b = malloc(2 * 37 * 80), *o1 = malloc(2 * 3 * 37), *o2 = malloc(2 * 3 * 37);
  int ok = 1;
  for (int t = 0; t < 4 && ok; t++) {
    float C[256], D[256];
    uint16_t A[512], B[512];
    for (int i = 0; i < 512; i++) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      int e = t == 1 ? (int)(st >> 59) * 5 - 40 : t == 3 ? -70 : 0; /* spread exponents; products below normal */
      A[i] = to_bf16(ldexpf((float)((int64_t)(st >> 40) - (1 << 23)) * 0x1p-23f, e));
      B[i] = to_bf16(ldexpf((float)((int64_t)(st & 0xFFFFFF) - (1 << 23)) * 0x1p-23f, t == 3 ? -70 : -e / 2));
    }
    for (int i = 0; i < 256; i++) C[i] = D[i] = (float)(i % 7) - 3.0f;
    bi_tile_dp(C, A, B);
    tile_dp_exact(D, A, B);
    ok = !memcmp(C, D, sizeof C);
  }
  for (int64_t i = 0; i < 100 * 80; i++) st ^= st << 13, st ^= st >> 7, st ^= st << 17, a[i] = to_bf16((float)((int64_t)(st >> 40) - (1 << 23)) * 0x1p-23f);
  for (int64_t i = 0; i < 37 * 80; i++) b[i] = a[(i * 7) % (100 * 80)];
  for (int64_t K = 64; K <= 80 && ok; K += 16) {
    linear_tiles(a, 3, K, b, 37, NULL, NULL, o1);
    for (int m = 0; m < 3; m++) linear_vec(a + m * K, 1, K, b, 37, NULL, NULL, o2 + 37 * m);
    ok = !memcmp(o1, o2, 2 * 3 * 37);
  }
  free(a), free(b), free(o1), free(o2);
  return ok;
}

#include "step.c" /* a whole forward in one call (kernels/step.py), on this file's bi_linear */
