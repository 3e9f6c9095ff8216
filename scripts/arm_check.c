/* A standalone check of portable.c, the variant aarch64 runs, no Python: built for aarch64 and run under
 * qemu-aarch64 (tests/test_kernels_aarch64.py), or natively on an aarch64 host. For every kernel with a row count:
 *  - batch invariance, bitwise: each row computed alone equals the same row inside passes of M = 1 .. 40, 48, 64,
 *    100 and 130 rows (at an offset that varies with M), N and K with tails; the same at 1 and 2 OpenMP threads;
 *    attention per query position, and a masked query against the same query over its keys packed; the whole
 *    forward (bi_model_step) fed token by token, in chunks, and at once;
 *  - agreement with an fp64 reference within a bound (bf16 rounding, and the int8 quantisation of x for the
 *    int8 and int4 linears); bi_linear against bi_linear_ref and bi_attention against bi_attention_ref, bitwise.
 * `a.out [quick] [digests.txt]`: quick, the smaller shapes (the test); digests.txt gets one line per check, a hash
 * of its outputs, to compare builds (the test compares aarch64's with x86-64's). Build (build.py's portable flags):
 *   aarch64-linux-gnu-gcc -O3 -fopenmp -ffp-contract=off -Wno-psabi scripts/arm_check.c -o arm_check -lm
 *   qemu-aarch64 -L /usr/aarch64-linux-gnu ./arm_check quick
 * -DKERNELS='"../playground/kernels/avx2.c"' (with avx2's flags) checks another variant that defines the same. */
#ifdef KERNELS
#include KERNELS
#else
#include "../playground/kernels/portable.c"
#endif
#include <stdio.h>

static uint64_t state = 88172645463325252ull;
static float rnd(void) { /* uniform in [-1, 1), the same bits on every CPU */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (float)((state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static uint16_t *fill(int64_t n, float scale) {
  uint16_t *p = malloc(n * 2);
  for (int64_t i = 0; i < n; i++) p[i] = to_bf16(rnd() * scale);
  return p;
}
static double f(uint16_t h) { return from_bf16(h); }
/* max(a, b) by a comparison: GCC 12's aarch64 vectoriser crashes on an fmax reduction over a loop (portable.c) */
static double worse(double a, double b) { return b != b ? INFINITY : b > a ? b : a; } /* a NaN: the worst */

static int fails, threads, quick;
static FILE *digests;
static uint64_t fnv(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
  return h;
}
static char names[64][64];
static uint64_t seen[64];
static int nseen;
/* One check's result; its outputs' hash must be the same at every thread count (and goes to digests.txt). */
static void report(const char *name, const void *out, size_t bytes, int bad, const char *what, double worst) {
  uint64_t h = fnv(out, bytes);
  int i = 0;
  while (i < nseen && strcmp(names[i], name)) i++;
  if (i == nseen) {
    snprintf(names[nseen], 64, "%s", name), seen[nseen++] = h;
    if (digests) fprintf(digests, "%s %016llx\n", name, (unsigned long long)h);
  } else if (seen[i] != h) {
    bad = 1, what = "DIFFERS FROM 1 THREAD";
  }
  fails += bad != 0;
  printf("threads=%d %-34s %s (worst error %.2f of the bound)\n", threads, name, bad ? what : "ok", worst);
}

/* ---- batch invariance of a kernel over rows: run(ctx, off, M, out) computes rows off .. off + M - 1 ---- */
typedef void (*rows_fn)(const void *ctx, int64_t off, int64_t M, uint16_t *out);
static const int64_t SIZES[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 48, 64, 100, 130};

/* The rows alone, then passes of every size: returns how many passes differ; all = the pass of every row. */
static int invariant(rows_fn run, const void *ctx, int64_t rows, int64_t width, uint16_t *all) {
  uint16_t *alone = malloc(rows * width * 2), *pass = malloc(rows * width * 2);
  int bad = 0;
  for (int64_t m = 0; m < rows; m++) run(ctx, m, 1, alone + m * width);
  for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES && SIZES[s] <= rows; s++) {
    int64_t M = SIZES[s], off = (M * 7) % (rows - M + 1);
    run(ctx, off, M, pass);
    bad += memcmp(pass, alone + off * width, M * width * 2) != 0;
  }
  run(ctx, 0, rows, all);
  bad += memcmp(all, alone, rows * width * 2) != 0;
  free(alone), free(pass);
  return bad;
}

/* ---- the linears: bf16, int8 (a scale per row), int4 (groups of G along K) ---- */
typedef struct {
  int kind;
  int64_t N, K, G;
  const uint16_t *x, *w, *bias, *resid, *s4;
  const int8_t *w8;
  const uint8_t *w4;
  const float *sw;
  const int32_t *rowsum;
  double *wd; /* the weight as the kernel sees it, (N, K) in fp64 */
} lin;

static void run_linear(const void *ctx, int64_t off, int64_t M, uint16_t *out) {
  const lin *L = ctx;
  const uint16_t *x = L->x + off * L->K, *r = L->resid ? L->resid + off * L->N : NULL;
  if (L->kind == 0) bi_linear(x, M, L->K, L->w, L->N, L->bias, r, out);
  if (L->kind == 1) bi_linear_i8(x, M, L->K, L->w8, L->N, L->sw, L->rowsum, L->bias, r, out);
  if (L->kind == 2) bi_linear_i4(x, M, L->K, L->w4, L->N, L->s4, L->G, L->bias, r, out);
}

/* A random linear of the kind; its weight in fp64 as the kernel sees it (int8: q sw; int4: (q - 8) scale). */
static lin make_linear(int kind, int64_t rows, int64_t N, int64_t K, int bias, int resid) {
  lin L = {kind, N, K, 32}; /* each fill in its own statement: the inputs' order is the same on every compiler */
  L.x = fill(rows * K, 1.0f);
  L.bias = bias ? fill(N, 1.0f) : NULL;
  L.resid = resid ? fill(rows * N, 1.0f) : NULL;
  L.wd = malloc(N * K * sizeof(double));
  if (kind == 0) {
    uint16_t *w = fill(N * K, 0.1f);
    for (int64_t i = 0; i < N * K; i++) L.wd[i] = f(w[i]);
    L.w = w;
  } else if (kind == 1) {
    int8_t *w = malloc(N * K);
    float *sw = malloc(N * 4);
    int32_t *rs = malloc(N * 4);
    for (int64_t n = 0; n < N; n++) {
      sw[n] = 0.001f * (1.5f + rnd()), rs[n] = 0;
      for (int64_t k = 0; k < K; k++) w[n * K + k] = (int8_t)(127 * rnd()), rs[n] += w[n * K + k];
      for (int64_t k = 0; k < K; k++) L.wd[n * K + k] = (double)w[n * K + k] * sw[n];
    }
    L.w8 = w, L.sw = sw, L.rowsum = rs;
  } else { /* ops.quantize_i4's layout: per 128 k, byte j holds k0 + j (low nibble) and k0 + 64 + j (high), q + 8 */
    int64_t Kp = (K + 127) & ~(int64_t)127, S = (Kp + L.G - 1) / L.G;
    uint8_t *w = calloc(N * Kp / 2, 1);
    uint16_t *s = calloc(N * S, 2);
    for (int64_t n = 0; n < N; n++)
      for (int64_t g = 0; g < Kp / L.G; g++) {
        float v[128], amax = 0;
        for (int64_t j = 0; j < L.G; j++) {
          v[j] = g * L.G < K ? 0.1f * rnd() : 0;
          if (fabsf(v[j]) > amax) amax = fabsf(v[j]);
        }
        s[n * S + g] = to_bf16(amax / 7);
        for (int64_t j = 0; j < L.G; j++) {
          int64_t k = g * L.G + j;
          float q = amax > 0 ? fminf(7, fmaxf(-7, nearbyintf(v[j] / from_bf16(s[n * S + g])))) : 0;
          w[n * Kp / 2 + (k / 128) * 64 + k % 64] |= (uint8_t)((int)q + 8) << (k % 128 >= 64 ? 4 : 0);
          if (k < K) L.wd[n * K + k] = q * f(s[n * S + g]);
        }
      }
    L.w4 = w, L.s4 = s;
  }
  return L;
}

/* out against fp64: |got - y| within bf16's rounding of the sum (and of the residual's second rounding), plus, for
 * int8 and int4, x's quantisation (half a step of amax / 127 per element) and fp32's sums. Returns the worst
 * error as a fraction of that bound. */
static double linear_error(const lin *L, int64_t rows, const uint16_t *out) {
  double worst = 0;
  for (int64_t m = 0; m < rows; m++) {
    double amax = 0;
    for (int64_t k = 0; k < L->K; k++) /* not fmax: see worse() */
      if (fabs(f(L->x[m * L->K + k])) > amax) amax = fabs(f(L->x[m * L->K + k]));
    double step = L->kind ? amax / 127 : 0;
    for (int64_t n = 0; n < L->N; n++) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < L->K; k++) {
        double p = f(L->x[m * L->K + k]) * L->wd[n * L->K + k];
        s += p, mag += fabs(p);
      }
      double wmag = 0;
      for (int64_t k = 0; k < L->K; k++) wmag += fabs(L->wd[n * L->K + k]);
      if (L->bias) s += f(L->bias[n]);
      double total = L->resid ? s + f(L->resid[m * L->N + n]) : s;
      double bound = (fabs(s) + fabs(total)) * 0x1p-8 + 0.5 * step * wmag * 1.001 + mag * 1e-5 + 1e-6;
      worst = worse(worst, fabs(f(out[m * L->N + n]) - total) / bound);
    }
  }
  return worst;
}

static void check_linear(int kind, int64_t rows, int64_t N, int64_t K, int bias, int resid) {
  static const char *kinds[] = {"bf16", "int8", "int4"};
  uint64_t keep = state;
  state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(kind * 1000003 + N * 1009 + K * 7 + bias * 2 + resid);
  lin L = make_linear(kind, rows, N, K, bias, resid);
  state = keep;
  uint16_t *all = malloc(rows * N * 2);
  int bad = invariant(run_linear, &L, rows, N, all), ref_differs = 0;
  double worst = linear_error(&L, rows, all);
  if (kind == 0) { /* the one-element definition */
    uint16_t *ref = malloc(rows * N * 2);
    bi_linear_ref(L.x, rows, K, L.w, N, L.bias, L.resid, ref);
    ref_differs = memcmp(ref, all, rows * N * 2) != 0;
    free(ref);
  }
  char name[64];
  snprintf(name, 64, "linear %s N=%ld K=%ld%s%s", kinds[kind], (long)N, (long)K, bias ? " bias" : "", resid ? " resid" : "");
  report(name, all, rows * N * 2, bad || ref_differs || worst > 1,
         bad && ref_differs ? "ROW ALONE DIFFERS, REF DIFFERS" : ref_differs ? "REF DIFFERS" : bad ? "ROW ALONE DIFFERS" : "WRONG",
         worst);
  free(all);
}

/* ---- RMSNorm, SiLU * up, rotary: rows alone and in passes, and fp64 ---- */
typedef struct {
  int64_t D, H, Hkv;
  const uint16_t *x, *w, *cos, *sin;
} rowk;

static void run_norm(const void *c, int64_t off, int64_t M, uint16_t *out) {
  const rowk *R = c;
  bi_rmsnorm(R->x + off * R->D, M, R->D, R->w, 1e-6f, out);
}
static void run_silu(const void *c, int64_t off, int64_t M, uint16_t *out) {
  const rowk *R = c;
  bi_silu_mul(R->x + off * 2 * R->D, M, R->D, out);
}
static void run_rotary(const void *c, int64_t off, int64_t M, uint16_t *out) { /* out: (M, H + 2 Hkv, D) */
  const rowk *R = c;
  int64_t D = R->D, W = (R->H + 2 * R->Hkv) * D;
  uint16_t *q = malloc(M * W * 2), *k = q + M * R->H * D, *v = k + M * R->Hkv * D;
  bi_rotary_split(R->x + off * W, 1, M, R->H, R->Hkv, D, R->cos + off * D, R->sin + off * D, q, k, v);
  for (int64_t m = 0; m < M; m++)
    for (int64_t h = 0; h < R->H + 2 * R->Hkv; h++) {
      const uint16_t *src = h < R->H ? q + (h * M + m) * D
                          : h < R->H + R->Hkv ? k + ((h - R->H) * M + m) * D
                          : v + ((h - R->H - R->Hkv) * M + m) * D;
      memcpy(out + m * W + h * D, src, D * 2);
    }
  free(q);
}

static void check_rows(void) {
  int64_t rows = 130, D = 200, H = 4, Hkv = 2, Dh = 32, W = (H + 2 * Hkv) * Dh;
  rowk R = {D};
  R.x = fill(rows * D, 2.0f);
  R.w = fill(D, 1.0f);
  uint16_t *all = malloc(rows * W * 4);
  int bad = invariant(run_norm, &R, rows, D, all);
  double worst = 0;
  for (int64_t m = 0; m < rows; m++) {
    double ss = 0;
    for (int64_t d = 0; d < D; d++) ss += f(R.x[m * D + d]) * f(R.x[m * D + d]);
    for (int64_t d = 0; d < D; d++) {
      double y = f(R.w[d]) * f(R.x[m * D + d]) / sqrt(ss / D + 1e-6);
      worst = worse(worst, fabs(f(all[m * D + d]) - y) / (fabs(y) * 0x1p-7 + 1e-6));
    }
  }
  report("rmsnorm D=200", all, rows * D * 2, bad || worst > 1, bad ? "ROW ALONE DIFFERS" : "WRONG", worst);
  rowk S = {D};
  S.x = fill(rows * 2 * D, 6.0f); /* gate and up: (rows, 2D) */
  bad = invariant(run_silu, &S, rows, D, all), worst = 0;
  for (int64_t m = 0; m < rows; m++)
    for (int64_t d = 0; d < D; d++) {
      double g = f(S.x[m * 2 * D + d]), u = f(S.x[m * 2 * D + D + d]), y = g / (1 + exp(-g)) * u;
      worst = worse(worst, fabs(f(all[m * D + d]) - y) / (fabs(y) * 0x1p-8 + fabs(g * u) * 1e-5 + 1e-7));
    }
  report("silu*up I=200", all, rows * D * 2, bad || worst > 1, bad ? "ROW ALONE DIFFERS" : "WRONG", worst);
  uint16_t *cs = malloc(rows * Dh * 2), *sn = malloc(rows * Dh * 2);
  for (int64_t p = 0; p < rows; p++)
    for (int64_t d = 0; d < Dh; d++) {
      double a = p * pow(10000.0, -(double)(2 * (d % (Dh / 2))) / Dh);
      cs[p * Dh + d] = to_bf16((float)cos(a)), sn[p * Dh + d] = to_bf16((float)sin(a));
    }
  rowk Q = {Dh, H, Hkv, NULL, NULL, cs, sn};
  Q.x = fill(rows * W, 1.0f);
  bad = invariant(run_rotary, &Q, rows, W, all), worst = 0;
  for (int64_t p = 0; p < rows; p++)
    for (int64_t h = 0; h < H + Hkv; h++)
      for (int64_t d = 0; d < Dh; d++) {
        const uint16_t *x = Q.x + p * W + h * Dh;
        double r = d < Dh / 2 ? -f(x[d + Dh / 2]) : f(x[d - Dh / 2]);
        double a = f(x[d]) * f(cs[p * Dh + d]), b = r * f(sn[p * Dh + d]), y = a + b;
        worst = worse(worst, fabs(f(all[p * W + h * Dh + d]) - y) / (fabs(y) * 0x1p-8 + (fabs(a) + fabs(b)) * 1e-6 + 1e-7));
      }
  report("rotary H=4 Hkv=2 D=32", all, rows * W * 2, bad || worst > 1, bad ? "ROW ALONE DIFFERS" : "WRONG", worst);
  free(all), free(cs), free(sn);
}

/* ---- attention: per query position, causal; a masked pass against each query over its keys packed ---- */
typedef struct {
  int64_t H, Hkv, T, D;
  const uint16_t *q, *k, *v; /* q (H, T, D), k and v (Hkv, T, D): position p's query sees keys 0 .. p */
} attk;

static void run_attention(const void *c, int64_t off, int64_t M, uint16_t *out) { /* out: (M, H, D) */
  const attk *A = c;
  int64_t sq[4] = {A->H * A->T * A->D, A->T * A->D, A->D, 1}, sk[4] = {A->Hkv * A->T * A->D, A->T * A->D, A->D, 1};
  bi_attention(A->q + off * A->D, sq, A->k, sk, A->v, sk, NULL, NULL, out, 1, A->H, A->Hkv, M, off + M, A->D,
               1.0f / sqrtf((float)A->D));
}

static void check_attention(int64_t D) {
  int64_t H = 4, Hkv = 2, T = 130;
  attk A = {H, Hkv, T, D};
  A.q = fill(H * T * D, 2.0f);
  A.k = fill(Hkv * T * D, 2.0f);
  A.v = fill(Hkv * T * D, 1.0f);
  uint16_t *all = malloc(T * H * D * 2), *ref = malloc(T * H * D * 2);
  int bad = invariant(run_attention, &A, T, H * D, all);
  int64_t sq[4] = {H * T * D, T * D, D, 1}, sk[4] = {Hkv * T * D, T * D, D, 1};
  float scale = 1.0f / sqrtf((float)D);
  bi_attention_ref(A.q, sq, A.k, sk, A.v, sk, NULL, NULL, ref, 1, H, Hkv, T, T, D, scale, NULL);
  int ref_differs = memcmp(ref, all, T * H * D * 2) != 0;
  double worst = 0, *p = malloc(T * sizeof(double));
  for (int64_t i = 0; i < T; i++)
    for (int64_t h = 0; h < H; h++) {
      const uint16_t *qv = A.q + (h * T + i) * D, *kb = A.k + (h / 2) * T * D, *vb = A.v + (h / 2) * T * D;
      double mx = -1e300, l = 0;
      for (int64_t j = 0; j <= i; j++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += f(qv[d]) * f(kb[j * D + d]);
        p[j] = s * scale, mx = worse(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; j++) p[j] = exp(p[j] - mx), l += p[j];
      for (int64_t d = 0; d < D; d++) {
        double y = 0, mag = 0;
        for (int64_t j = 0; j <= i; j++) y += p[j] * f(vb[j * D + d]) / l, mag += p[j] * fabs(f(vb[j * D + d])) / l;
        worst = worse(worst, fabs(f(all[(i * H + h) * D + d]) - y) / (fabs(y) * 0x1p-8 + mag * 1e-4 + 1e-6));
      }
    }
  char name[64];
  snprintf(name, 64, "attention causal D=%ld", (long)D);
  report(name, all, T * H * D * 2, bad || ref_differs || worst > 1,
         bad && ref_differs ? "ROW ALONE DIFFERS, REF DIFFERS" : ref_differs ? "REF DIFFERS" : bad ? "ROW ALONE DIFFERS" : "WRONG",
         worst);
  /* two batch rows, Q = 24 queries over T = 60 keys, random holes (some queries see nothing): each query against
   * itself alone over its allowed keys packed in order */
  int64_t B = 2, Q = 24, Tm = 60;
  uint16_t *q = fill(B * H * Q * D, 2.0f);
  uint16_t *k = fill(B * Hkv * Tm * D, 2.0f);
  uint16_t *v = fill(B * Hkv * Tm * D, 1.0f);
  uint8_t *allowed = malloc(B * Q * Tm);
  for (int64_t i = 0; i < B * Q * Tm; i++) allowed[i] = (i / Tm) % 11 != 5 && rnd() > -0.4f;
  int64_t sq2[4] = {H * Q * D, Q * D, D, 1}, sk2[4] = {Hkv * Tm * D, Tm * D, D, 1}, sm[3] = {Q * Tm, Tm, 1};
  uint16_t *out = malloc(B * Q * H * D * 2), *one = malloc(H * D * 2), *kp = malloc(Hkv * Tm * D * 2), *vp = malloc(Hkv * Tm * D * 2);
  bi_attention(q, sq2, k, sk2, v, sk2, allowed, sm, out, B, H, Hkv, Q, Tm, D, scale);
  bad = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Q; i++) {
      int64_t n = 0;
      for (int64_t j = 0; j < Tm; j++)
        if (allowed[(b * Q + i) * Tm + j]) {
          for (int64_t g = 0; g < Hkv; g++) {
            memcpy(kp + (g * Tm + n) * D, k + ((b * Hkv + g) * Tm + j) * D, D * 2);
            memcpy(vp + (g * Tm + n) * D, v + ((b * Hkv + g) * Tm + j) * D, D * 2);
          }
          n++;
        }
      int64_t sq1[4] = {0, Q * D, D, 1}, sk1[4] = {0, Tm * D, D, 1};
      bi_attention(q + b * H * Q * D + i * D, sq1, kp, sk1, vp, sk1, NULL, NULL, one, 1, H, Hkv, 1, n, D, scale);
      bad += memcmp(one, out + (b * Q + i) * H * D, H * D * 2) != 0;
    }
  snprintf(name, 64, "attention masked D=%ld", (long)D);
  report(name, out, B * Q * H * D * 2, bad, "MASKED QUERY DIFFERS FROM PACKED", 0);
  free(all), free(ref), free(p), free(q), free(k), free(v), free(allowed), free(out), free(one), free(kp), free(vp);
  free((void *)A.q), free((void *)A.k), free((void *)A.v);
}

/* ---- the whole forward (step.c): 2 layers, q/k/v bf16, o int8, gate/up int4, down bf16, head bf16; the same 40
 * tokens fed at once, one at a time, and in chunks of 1, 2, 3, ...: the last position's hidden state and logits,
 * and every key and value in the caches, bitwise the same ---- */
static void check_step(void) {
  enum { L = 2, H = 4, HKV = 2, D = 32, E = 128, I = 96, V = 50, S = 40 };
  int64_t W = (H + 2 * HKV) * D;
  bi_layer layer[L];
  for (int l = 0; l < L; l++) {
    lin qkv = make_linear(0, 1, W, E, 1, 0);
    lin o = make_linear(1, 1, E, H * D, 0, 0);
    lin gu = make_linear(2, 1, 2 * I, E, 0, 0);
    lin dn = make_linear(0, 1, E, I, 0, 0);
    layer[l] = (bi_layer){NULL, NULL,
                          {0, W, E, qkv.w, NULL, NULL, qkv.bias},
                          {1, E, H * D, o.w8, o.sw, o.rowsum},
                          {2, 2 * I, E, gu.w4, NULL, NULL, NULL, gu.s4, 32},
                          {0, E, I, dn.w},
                          calloc(HKV * S * D, 2), calloc(HKV * S * D, 2)};
    layer[l].ln1 = fill(E, 1.0f);
    layer[l].ln2 = fill(E, 1.0f);
  }
  lin head = make_linear(0, 1, V, E, 0, 0);
  bi_model m = {L, H, HKV, D, E, I, S, 1e-6f, 1.0f / sqrtf(D), NULL, NULL, layer, {0, V, E, head.w}};
  m.embed = fill(V * E, 1.0f);
  m.norm = fill(E, 1.0f);
  uint16_t *cs = malloc(S * D * 2), *sn = malloc(S * D * 2), hidden[E], logits[V], h0[E], l0[V];
  for (int64_t p = 0; p < S; p++)
    for (int64_t d = 0; d < D; d++) {
      double a = p * pow(10000.0, -(double)(2 * (d % (D / 2))) / D);
      cs[p * D + d] = to_bf16((float)cos(a)), sn[p * D + d] = to_bf16((float)sin(a));
    }
  int64_t tokens[S];
  for (int s = 0; s < S; s++) tokens[s] = (int64_t)((rnd() + 1) * 0.5f * V) % V;
  uint16_t *cache0 = malloc(L * 2 * HKV * S * D * 2);
  int bad = 0;
  for (int split = 0; split < 3; split++) { /* 0: all 40 at once; 1: one at a time; 2: chunks of 1, 2, 3, ... */
    for (int64_t pos = 0, c = 1, n; pos < S; pos += n) {
      n = split == 0 ? S : split == 1 ? 1 : c++;
      if (n > S - pos) n = S - pos;
      if (bi_model_step(&m, tokens + pos, n, pos, cs + pos * D, sn + pos * D, 1, hidden, logits)) bad = 1;
    }
    for (int l = 0; l < L; l++) {
      uint16_t *dst = cache0 + l * 2 * HKV * S * D;
      if (split == 0) memcpy(dst, layer[l].kc, HKV * S * D * 2), memcpy(dst + HKV * S * D, layer[l].vc, HKV * S * D * 2);
      else bad |= memcmp(dst, layer[l].kc, HKV * S * D * 2) || memcmp(dst + HKV * S * D, layer[l].vc, HKV * S * D * 2);
    }
    if (split == 0) memcpy(h0, hidden, sizeof h0), memcpy(l0, logits, sizeof l0);
    else bad |= memcmp(h0, hidden, sizeof h0) || memcmp(l0, logits, sizeof l0);
  }
  report("model step, 40 tokens 3 ways", l0, sizeof l0, bad, "SPLITS DIFFER", 0);
  for (int l = 0; l < L; l++) free(layer[l].kc), free(layer[l].vc);
  free(cs), free(sn), free(cache0);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "quick")) quick = 1;
    else digests = fopen(argv[i], "w");
#if defined(__aarch64__)
  printf("an aarch64 build");
#else
  printf("not an aarch64 build");
#endif
#if defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
  printf(", MADD is fmaf\n");
#else
  printf(", MADD is a multiply and an add\n");
#endif
  const int64_t NK[][2] = {{29, 80}, {31, 33}, {48, 64}, {7, 15}, {100, 200}, {17, 1000}};
  for (threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    state = 88172645463325252ull;
    for (int i = 0; i < (quick ? 4 : 6); i++) check_linear(0, 130, NK[i][0], NK[i][1], i % 2, i % 3 == 0);
    for (int i = 0; i < (quick ? 4 : 6); i++) check_linear(1, 130, NK[i][0], NK[i][1], i % 2 == 0, i % 3 == 1);
    const int64_t K4[][2] = {{29, 96}, {31, 32}, {48, 256}, {7, 160}};
    for (int i = 0; i < 4; i++) check_linear(2, 130, K4[i][0], K4[i][1], i % 2, i % 3 == 0);
    check_rows();
    check_attention(32);
    if (!quick) check_attention(128);
    check_step();
    if (digests) fclose(digests), digests = NULL;
  }
  printf(fails ? "FAILED: %d\n" : "all ok\n", fails);
  return fails != 0;
}
