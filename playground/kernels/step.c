/* A whole forward of a Llama-family model (Llama, Qwen2, Mistral decoder layers, fused as kernels/model.py fuses
 * them) for one sequence in one call: the embedding rows, every layer, the final norm and the head, with the KV
 * cache in buffers the caller owns (a crop is a length change). Included at the end of portable.c, which every
 * variant includes (amx.c includes it itself, after its own linear): it calls that variant's kernels, in the order and with the
 * arguments kernels/model.py's _layer_forward gives them, so its outputs are bitwise those of HF's wrapper
 * around the fused layers; only the Python between the calls is gone (about 220 ctypes calls and HF's
 * wrapper per step: docs/levers.md, issue 43).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The variant's kernels (defined above, or after this file where avx2.c and avx512.c replace them). */
void bi_linear(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, int64_t N, const uint16_t *bias,
               const uint16_t *resid, uint16_t *out);
void bi_linear_i8(const uint16_t *x, int64_t M, int64_t K, const int8_t *w, int64_t N, const float *sw,
                  const int32_t *rowsum, const uint16_t *bias, const uint16_t *resid, uint16_t *out);
void bi_linear_i4(const uint16_t *x, int64_t M, int64_t K, const uint8_t *w, int64_t N, const uint16_t *s, int64_t G,
                  const uint16_t *bias, const uint16_t *resid, uint16_t *out);
void bi_attention(const uint16_t *q, const int64_t *sq, const uint16_t *k, const int64_t *sk, const uint16_t *v,
                  const int64_t *sv, const uint8_t *allowed, const int64_t *sm, uint16_t *out, int64_t B, int64_t H,
                  int64_t Hkv, int64_t Q, int64_t T, int64_t D, float scale);
void bi_rmsnorm(const uint16_t *x, int64_t M, int64_t D, const uint16_t *w, float eps, uint16_t *out);
void bi_rotary_split(const uint16_t *qkv, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D,
                     const uint16_t *cos, const uint16_t *sin, uint16_t *q, uint16_t *k, uint16_t *v);
void bi_silu_mul(const uint16_t *gu, int64_t M, int64_t I, uint16_t *out);

/* One projection, as ops.Proj holds it. kind 0: bf16 weight (n, k); 1: int8 rows with a scale per row and the
 * rows' sums; 2: int4 nibbles (ops.quantize_i4) with a bf16 scale per group of `group` along K (extra: the scales).
 * Another weight form joins with its own kind and case in bi_proj_call. */
typedef struct {
  int64_t kind, n, k;
  const void *w;
  const float *scale;
  const int32_t *rowsum;
  const uint16_t *bias;
  const void *extra;
  int64_t group;
} bi_proj;

typedef struct {
  const uint16_t *ln1, *ln2; /* input_layernorm, post_attention_layernorm weights */
  bi_proj qkv, o, gate_up, down;
  uint16_t *kc, *vc; /* this layer's keys and values: (Hkv, cap, D) each */
} bi_layer;

typedef struct {
  int64_t layers, heads, kv_heads, head_dim, hidden, inter, cap;
  float eps, scale;
  const uint16_t *embed; /* (vocab, hidden) */
  const uint16_t *norm;  /* the final norm's weight */
  const bi_layer *layer;
  bi_proj head;
} bi_model;

/* 0, or -1 for a form this build does not know (the caller then keeps HF's path). */
static int bi_proj_call(const bi_proj *p, const uint16_t *x, int64_t M, const uint16_t *resid, uint16_t *out) {
  switch (p->kind) {
  case 0: bi_linear(x, M, p->k, (const uint16_t *)p->w, p->n, p->bias, resid, out); return 0;
  case 1: bi_linear_i8(x, M, p->k, (const int8_t *)p->w, p->n, p->scale, p->rowsum, p->bias, resid, out); return 0;
  case 2:
    bi_linear_i4(x, M, p->k, (const uint8_t *)p->w, p->n, (const uint16_t *)p->extra, p->group, p->bias, resid, out);
    return 0;
  default: return -1;
  }
}

/* Whether this build computes a projection of this kind (the Python side asks before it builds a model). */
int bi_proj_known(int64_t kind) { return kind == 0 || kind == 1 || kind == 2; }

/* tokens (S,) at positions pos .. pos + S - 1 (the cache holds pos positions and gets S more); cos, sin: the
 * rotary tables' rows for those positions, (S, D) bf16. Writes the last `keep` positions' final-norm outputs
 * (hidden, (keep, hidden) bf16) and, when logits is not NULL, their head outputs ((keep, vocab): a chain's
 * verification scores every fed draft token). Returns 0, or -1 (keep outside 1..S, the cache is too small, a
 * projection of an unknown kind: nothing is computed). allowed: NULL for a causal pass, else bi_model_step_tree's. */
static int model_pass(const bi_model *m, const int64_t *tokens, int64_t S, int64_t pos, const uint16_t *cos,
                      const uint16_t *sin, const uint8_t *allowed, int64_t keep, uint16_t *hidden, uint16_t *logits) {
  int64_t H = m->heads, Hkv = m->kv_heads, D = m->head_dim, E = m->hidden, I = m->inter, C = m->cap;
  int64_t W = (H + 2 * Hkv) * D, T = pos + S;
  if (S < 1 || pos < 0 || T > C || keep < 1 || keep > S) return -1;
  if (!bi_proj_known(m->head.kind)) return -1;
  for (int64_t l = 0; l < m->layers; l++) {
    const bi_layer *L = m->layer + l;
    if (!bi_proj_known(L->qkv.kind) || !bi_proj_known(L->o.kind) || !bi_proj_known(L->gate_up.kind) ||
        !bi_proj_known(L->down.kind))
      return -1;
  }
  size_t n = (size_t)S * (size_t)(3 * E + W + H * D + 2 * Hkv * D + H * D + 3 * I);
  uint16_t *buf = (uint16_t *)malloc(n * sizeof(uint16_t));
  if (!buf) return -1;
  uint16_t *x = buf, *x2 = x + S * E, *h = x2 + S * E, *qkv = h + S * E, *q = qkv + S * W, *kt = q + S * H * D;
  uint16_t *vt = kt + S * Hkv * D, *att = vt + S * Hkv * D, *gu = att + S * H * D, *act = gu + 2 * S * I;
  for (int64_t s = 0; s < S; s++) memcpy(x + s * E, m->embed + tokens[s] * E, (size_t)E * sizeof(uint16_t));
  int64_t sq[4] = {H * S * D, S * D, D, 1}, sk[4] = {Hkv * C * D, C * D, D, 1}, sm[3] = {S * T, T, 1};
  for (int64_t l = 0; l < m->layers; l++) {
    const bi_layer *L = m->layer + l;
    bi_rmsnorm(x, S, E, L->ln1, m->eps, h);
    bi_proj_call(&L->qkv, h, S, NULL, qkv);
    bi_rotary_split(qkv, 1, S, H, Hkv, D, cos, sin, q, kt, vt);
    for (int64_t g = 0; g < Hkv; g++) { /* the new keys and values into the cache, after its pos positions */
      memcpy(L->kc + (g * C + pos) * D, kt + g * S * D, (size_t)(S * D) * sizeof(uint16_t));
      memcpy(L->vc + (g * C + pos) * D, vt + g * S * D, (size_t)(S * D) * sizeof(uint16_t));
    }
    bi_attention(q, sq, L->kc, sk, L->vc, sk, allowed, allowed ? sm : NULL, att, 1, H, Hkv, S, T, D, m->scale);
    bi_proj_call(&L->o, att, S, x, x2);
    bi_rmsnorm(x2, S, E, L->ln2, m->eps, h);
    bi_proj_call(&L->gate_up, h, S, NULL, gu);
    bi_silu_mul(gu, S, I, act);
    bi_proj_call(&L->down, act, S, x2, x);
  }
  bi_rmsnorm(x + (S - keep) * E, keep, E, m->norm, m->eps, hidden);
  if (logits) bi_proj_call(&m->head, hidden, keep, NULL, logits);
  free(buf);
  return 0;
}

/* The causal pass (a prompt, a chain's tokens): model_pass without a mask. */
int bi_model_step(const bi_model *m, const int64_t *tokens, int64_t S, int64_t pos, const uint16_t *cos,
                  const uint16_t *sin, int64_t keep, uint16_t *hidden, uint16_t *logits) {
  return model_pass(m, tokens, S, pos, cos, sin, NULL, keep, hidden, logits);
}

/* bi_model_step for a token tree's rows: cos, sin are each row's own rotary rows (a node's position is its depth
 * after the root, not its index), and allowed (S, pos + S) uint8 says which cached and fed positions each row
 * sees (the cache, its ancestors and itself), as HF's 4D mask does on the fused layers. */
int bi_model_step_tree(const bi_model *m, const int64_t *tokens, int64_t S, int64_t pos, const uint16_t *cos,
                       const uint16_t *sin, const uint8_t *allowed, int64_t keep, uint16_t *hidden,
                       uint16_t *logits) {
  if (!allowed) return -1;
  return model_pass(m, tokens, S, pos, cos, sin, allowed, keep, hidden, logits);
}
