/* Batch-invariant bf16 kernels for Intel Xeons with AMX (Sapphire Rapids and later): avx512.c for everything
 * (attention, norms, rotary, the int8 draft's VNNI linear), with the bf16 linear on AMX tiles.
 *
 * The linear computes out^T = w x^T, so that the weights need no repacking: an A tile is 16 weight rows x 32 bf16
 * of K, loaded straight from the row-major (N, K) weight (stride 2K bytes); a B tile is 16 input rows x 32 bf16 of
 * K in VNNI pairs (B[kp][2j + e] = x[j][2kp + e]), repacked once per call; a C tile is 16 weight rows x 16 input
 * rows in fp32. Every C element starts at zero and takes one tdpbf16ps per chunk of 32 along K, chunk 0 first, in
 * the one tile configuration (16 rows x 64 bytes, every tile) that every pass uses, one-token steps included;
 * inputs beyond M and K are zeros. So an element is a function of its weight row and its input row alone,
 * whatever the number of rows in the pass, the blocking or the thread. The epilogue is avx512.c's: + bias,
 * round to bf16, + residual, round again.
 *
 * AMX_EMULATE (for a machine without AMX) replaces the tile instructions with plain C, to test the packing, the
 * blocking and the epilogue; the real tile instructions only run on an AMX CPU.
 */
#define bi_linear bi_linear_avx512 /* avx512.c's linear: the fallback where the kernel refuses the tiles */
#define bi_linear_ref bi_linear_ref_avx512
#include "avx512.c"
#undef bi_linear
#undef bi_linear_ref

#include <sys/syscall.h>
#include <unistd.h>

/* Bytes of weight rows one thread keeps in L2 while the blocks of input rows pass them (prefill). */
#define ROWS_BUDGET (1200 * 1024)
/* In a pass of at most 32 rows, blocks of 32 weight rows are prefetched this many blocks ahead into L2. */
#define TAHEAD 2

#ifdef AMX_EMULATE
static __thread uint8_t emu[8][1024];
#define T_CONFIG() (void)0
#define T_RELEASE() (void)0
#define T_ZERO(t) memset(emu[t], 0, 1024)
#define T_LOAD(t, p, s) \
  for (int r_ = 0; r_ < 16; r_++) memcpy(emu[t] + 64 * r_, (const char *)(p) + r_ * (s), 64)
#define T_STORE(t, p, s) \
  for (int r_ = 0; r_ < 16; r_++) memcpy((char *)(p) + r_ * (s), emu[t] + 64 * r_, 64)
#define T_DP(c, a, b) emu_dp(c, a, b)
static void emu_dp(int c, int a, int b) { /* the SDM's pseudo-code of tdpbf16ps */
  float *C = (float *)emu[c];
  const uint16_t *A = (const uint16_t *)emu[a], *B = (const uint16_t *)emu[b];
  for (int m = 0; m < 16; m++)
    for (int k = 0; k < 16; k++)
      for (int n = 0; n < 16; n++) {
        C[16 * m + n] += from_bf16(A[32 * m + 2 * k]) * from_bf16(B[32 * k + 2 * n]);
        C[16 * m + n] += from_bf16(A[32 * m + 2 * k + 1]) * from_bf16(B[32 * k + 2 * n + 1]);
      }
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
#ifdef AMX_EMULATE
    amx_state = 1;
#else
    amx_state = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
#endif
  }
  return amx_state == 1;
}

/* r[i][j] -> r[j][i] for 16 x 16 32-bit lanes: bit s of the row and bit s of the column swapped, s = 8, 4, 2, 1. */
static inline void transpose16(__m512 *r) {
  for (int s = 8; s >= 1; s >>= 1) {
    int lo[16], hi[16];
    for (int j = 0; j < 16; j++) {
      lo[j] = (j & s) ? 16 + j - s : j;
      hi[j] = (j & s) ? 16 + j : j + s;
    }
    __m512i vlo = _mm512_loadu_si512(lo), vhi = _mm512_loadu_si512(hi);
    for (int i = 0; i < 16; i++)
      if (!(i & s)) {
        __m512 a = r[i], b = r[i + s];
        r[i] = _mm512_permutex2var_ps(a, vlo, b);
        r[i + s] = _mm512_permutex2var_ps(a, vhi, b);
      }
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
static void finish(const float *cbuf, int64_t m0, int64_t M, int64_t n0, int64_t N, const uint16_t *bias,
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
          finish(cbuf + 256 * (2 * j + i), 16 * (mt0 + j), M, n0 + 16 * i, N, bias, resid, out);
    }
  }
}

/* x: (M, K), w: (N, K), bias: (N,) or NULL, resid: (M, N) or NULL (added to the result), out: (M, N); all bf16,
 * row-major, contiguous. Every element as the header says, whatever M. */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out) {
  if (M <= 0 || N <= 0) return;
  if (!bi_kernel_ready()) {
    bi_linear_avx512(x, M, K, w, N, bias, resid, out);
    return;
  }
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

/* The definition, one element at a time: each (input row, weight row) alone in its tiles, the rest zeros (tests
 * compare bi_linear with it, bitwise). */
void bi_linear_ref(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
                   const uint16_t *resid, uint16_t *out) {
  if (!bi_kernel_ready()) {
    bi_linear_ref_avx512(x, M, K, w, N, bias, resid, out);
    return;
  }
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++)
      bi_linear(x + m * K, 1, K, w + n * K, 1, bias ? bias + n : NULL, resid ? resid + m * N + n : NULL, out + m * N + n);
}
