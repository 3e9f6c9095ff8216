/* A standalone check of amx.c's bf16 linear, no Python: against an fp64 reference to bf16 precision, bitwise
 * against its one-element definition (bi_linear_ref), and batch invariance bitwise (every row alone, every
 * prefix of rows, equals the rows together). Build and run (an AMX CPU; -DAMX_EMULATE elsewhere):
 *   gcc -O2 -fopenmp -march=x86-64-v4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 scripts/amx_check.c -lm
 * `a.out quick`: the small shapes only (tests/test_kernels_amx.py runs them emulated). */
#include "../playground/kernels/amx.c"
#include <stdio.h>

static uint16_t bf(float f) { return to_bf16(f); }
static uint64_t state = 88172645463325252ull;
static float rnd(void) { /* uniform in [-1, 1) */
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (float)((state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static uint16_t *fill(int64_t n, float scale) {
  uint16_t *p = malloc(n * 2);
  for (int64_t i = 0; i < n; i++) p[i] = bf(rnd() * scale);
  return p;
}

static int check(int64_t M, int64_t N, int64_t K, int with_bias, int with_resid, int with_ref) {
  uint16_t *x = fill(M * K, 1.0f), *w = fill(N * K, 0.1f), *b = with_bias ? fill(N, 1.0f) : NULL;
  uint16_t *r = with_resid ? fill(M * N, 1.0f) : NULL;
  uint16_t *all = malloc(M * N * 2), *one = malloc(N * 2), *ref = malloc(M * N * 2), *pre = malloc(M * N * 2);
  bi_linear(x, M, K, w, N, b, r, all);
  int bad = 0;
  double worst = 0;
  for (int64_t m = 0; m < M; m++) {
    bi_linear(x + m * K, 1, K, w, N, b, r ? r + m * N : NULL, one);
    if (memcmp(one, all + m * N, N * 2)) bad |= 1;
    for (int64_t n = 0; n < N; n++) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = (double)from_bf16(x[m * K + k]) * from_bf16(w[n * K + k]);
        s += p, mag += fabs(p);
      }
      if (b) s += from_bf16(b[n]);
      double got = from_bf16(all[m * N + n]);
      double total = r ? s + from_bf16(r[m * N + n]) : s; /* the residual: a second rounding, of the sum */
      double err = fabs(got - total) / ((fabs(s) + fabs(total)) * 0x1p-8 + mag * 1e-5 + 1e-6);
      if (err > worst) worst = err;
    }
  }
  if (worst > 2.0) bad |= 2;
  for (int64_t m = 1; m < M; m += (M > 40 ? 13 : 1)) { /* prefixes */
    bi_linear(x, m, K, w, N, b, r, pre);
    if (memcmp(pre, all, m * N * 2)) bad |= 4;
  }
  if (with_ref) {
    bi_linear_ref(x, M, K, w, N, b, r, ref);
    if (memcmp(ref, all, M * N * 2)) bad |= 8;
  }
  bi_linear_avx512(x, M, K, w, N, b, r, ref);
  int64_t differ = 0;
  for (int64_t i = 0; i < M * N; i++) differ += ref[i] != all[i];
  printf("M=%-4ld N=%-5ld K=%-5ld bias=%d resid=%d ref=%d: %s (worst error %.2f of the bound; %ld of %ld differ from avx512's in the last bits)\n",
         (long)M, (long)N, (long)K, with_bias, with_resid, with_ref,
         bad ? (bad == 1 ? "ROW ALONE DIFFERS" : bad == 2 ? "WRONG" : bad == 4 ? "PREFIX DIFFERS" : bad == 8 ? "REF DIFFERS" : "SEVERAL FAIL") : "ok",
         worst, (long)differ, (long)(M * N));
  free(x), free(w), free(b), free(r), free(all), free(one), free(ref), free(pre);
  return bad != 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int quick = argc > 1 && !strcmp(argv[1], "quick"); /* the shapes with every kind of remainder, small */
  printf("kernel grants the tiles: %d\n", bi_kernel_ready());
  int fails = 0;
  const int64_t Ms[] = {1, 2, 3, 9, 16, 17, 33, 64, 100};
  const int64_t NK[][2] = {{29, 80}, {31, 33}, {48, 64}, {16, 32}, {100, 200}, {1537, 96}, {256, 1536}, {64, 8960}};
  for (int i = 0; i < (quick ? 3 : 8); i++)
    for (int j = 0; j < 9; j++) {
      int64_t N = NK[i][0], K = NK[i][1], M = Ms[j];
      fails += check(M, N, K, j % 2, j % 3 == 0, M * N * K < 3000000);
    }
  fails += check(quick ? 70 : 300, 96, 128, 1, 1, 1);
  if (!quick) fails += check(2000, 64, 1536, 1, 0, 0);
  printf(fails ? "FAILED: %d\n" : "all ok\n", fails);
  return fails != 0;
}
