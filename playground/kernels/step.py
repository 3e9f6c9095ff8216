"""The lean forward: a Llama-family model whose layers kernels/model.py fused, for one sequence, in one C call per
pass (kernels/step.c: embedding rows, every layer, final norm, head), with its KV cache in buffers it owns.

Why: HF's wrapper around the fused layers (a ctypes call per kernel, the DynamicCache's torch.cat per layer, masks
and rotary embedding per pass) added time beyond the draft's weight stream (measured: docs/levers.md, "The draft
step without per-layer Python"). The C step calls the same kernels in the same order as the fused layers do, so its
outputs are bitwise those of `model(input_ids, cache, logits_to_keep=1)` (tests/test_step.py); a crop is a length
change. It takes passes of one sequence: causal ones (a chain's tokens, a prompt) and a token tree's (`LeanForward.tree`: a
tree mask and each row's own rotary position, step.c's bi_model_step_tree); batches and any model it does not apply
to keep HF's path (`why_not`). Two users: a model drafter's draft steps
(decoding/model.py), and the target's passes in the engine (`target_cache`, `score`: the prompt, a chain's
verification, a tree's, the target alone's steps, V(n)).

A projection reaches C as a `_Proj` (kind, sizes, pointers): `proj_form` knows ops.Proj's bf16, int8 and int4 forms;
a further form joins with a branch there, a case in step.c's bi_proj_call and a kind bi_proj_known accepts.
"""

from __future__ import annotations

import ctypes
import types

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.kernels import model as fused, wide as wide_pass
from playground.kernels.ops import Proj, library, why_not as kernels_why_not

_i64, _ptr, _f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
ROPES = ("default", "linear", "llama3", "yarn")  # rotary embeddings that depend on the position only


class _Proj(ctypes.Structure):
    _fields_ = [
        ("kind", _i64),
        ("n", _i64),
        ("k", _i64),
        ("w", _ptr),
        ("scale", _ptr),
        ("rowsum", _ptr),
        ("bias", _ptr),
        ("extra", _ptr),
        ("group", _i64),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("ln1", _ptr),
        ("ln2", _ptr),
        *((n, _Proj) for n in ("qkv", "o", "gate_up", "down")),
        ("kc", _ptr),
        ("vc", _ptr),
    ]


class _Model(ctypes.Structure):
    _fields_ = [
        *((n, _i64) for n in ("layers", "heads", "kv_heads", "head_dim", "hidden", "inter", "cap")),
        ("eps", _f32),
        ("scale", _f32),
        ("embed", _ptr),
        ("norm", _ptr),
        ("layer", ctypes.POINTER(_Layer)),
        ("head", _Proj),
    ]


def _addr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def proj_form(p: Proj) -> _Proj | None:
    """A Proj as step.c takes it, or None for a form it does not know (the model then keeps HF's path)."""
    bias = p.bias
    if bias is not None and (bias.dtype is not torch.bfloat16 or not bias.is_contiguous()):
        return None
    if getattr(p, "q", None) is None and getattr(p, "weight", None) is not None:
        w = p.weight
        if w.dtype is not torch.bfloat16 or not w.is_contiguous():
            return None
        return _Proj(0, p.n, p.k, w.data_ptr(), None, None, _addr(bias), None, 0)
    q = getattr(p, "q", None)
    if q is not None and q.dtype is torch.int8 and q.is_contiguous() and q.shape == (p.n, p.k):
        return _Proj(1, p.n, p.k, q.data_ptr(), p.scale.data_ptr(), p.rowsum.data_ptr(), _addr(bias), None, 0)
    q4 = getattr(p, "q4", None)
    if q4 is not None and q4.is_contiguous() and p.scale4.is_contiguous():
        return _Proj(2, p.n, p.k, q4.data_ptr(), None, None, _addr(bias), p.scale4.data_ptr(), p.group)
    return None


def _patched(module: torch.nn.Module, fn) -> bool:
    forward = module.__dict__.get("forward")
    return getattr(forward, "__func__", None) is fn


def _head(model: torch.nn.Module) -> Proj | None:
    """The LM head as a Proj: the int8 copy quantize_int8 made, or the bf16 Linear make_invariant patched."""
    head = model.get_output_embeddings()
    if head is None:
        return None
    if isinstance(getattr(head, "_bi", None), Proj) and _patched(head, fused._head_forward):
        return head._bi
    if isinstance(head, torch.nn.Linear) and head.weight.numel() and _patched(head, fused._linear_forward):
        return Proj(head.weight, head.bias)
    return None


def why_not(model: torch.nn.Module) -> str | None:
    """None when the lean forward computes this model bitwise as its HF forward does, else why not."""
    if kernels_why_not() or library() is None:
        return kernels_why_not() or "no kernels"
    inner, config = getattr(model, "model", None), getattr(model, "config", None)
    layers = getattr(inner, "layers", None)
    if config is None or layers is None or not len(layers) or getattr(inner, "embed_tokens", None) is None:
        return f"{type(model).__name__} is not a decoder of the Llama family"
    if any(
        not isinstance(getattr(l, "_bi", None), types.SimpleNamespace) or not _patched(l, fused._layer_forward)
        for l in layers
    ):
        return "its decoder layers do not run fused on the kernels"
    if set(getattr(config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return "it has sliding-window layers"
    if getattr(config, "layer_types", None) is None and getattr(config, "sliding_window", None):
        return "it has a sliding window"
    if getattr(getattr(inner, "rotary_emb", None), "rope_type", None) not in ROPES:
        return "its rotary embedding depends on more than the position"
    norms = [inner.norm, *(n for l in layers for n in (l.input_layernorm, l.post_attention_layernorm))]
    if not all(_patched(n, fused._norm_forward) for n in norms) or len({n.variance_epsilon for n in norms}) > 1:
        return "its norms do not all run on the kernels with one epsilon"
    if len({l.self_attn.scaling for l in layers}) > 1 or inner.embed_tokens.weight.dtype is not torch.bfloat16:
        return "its layers differ in attention scale, or its embedding is not bf16"
    head = _head(model)
    procs = [p for l in layers for p in (l._bi.qkv, l._bi.o, l._bi.gate_up, l._bi.down)]
    if head is None or any(proj_form(p) is None for p in (*procs, head)):
        return "a projection has a form the lean forward does not know"
    return None


class LeanForward:
    """One sequence's KV cache in buffers of its own and the lean forward over it. `length` positions are held;
    `crop(n)` keeps the first n. Not thread-safe (one per drafter). wide: a draft's, whose passes of at least
    wide.WIDE_ROWS rows run on torch's matmul (kernels/wide.py: deterministic, not batch-invariant; never the target's);
    `wide_passes` counts them."""

    def __init__(self, model: torch.nn.Module, capacity: int = 512, wide: bool = False):
        why = why_not(model)
        if why:
            raise RuntimeError(why)
        inner, config = model.model, model.config
        layers = inner.layers
        f = layers[0]._bi
        self.model, self.length, self.vocab = model, 0, None
        self.wide, self.wide_passes = wide, 0
        self._head = _head(model)
        self._layers = (_Layer * len(layers))()
        for c, l in zip(self._layers, layers):
            c.ln1, c.ln2 = l.input_layernorm.weight.data_ptr(), l.post_attention_layernorm.weight.data_ptr()
            c.qkv, c.o, c.gate_up, c.down = (proj_form(p) for p in (l._bi.qkv, l._bi.o, l._bi.gate_up, l._bi.down))
        self._model = _Model(
            len(layers),
            f.heads,
            f.kv_heads,
            f.head_dim,
            config.hidden_size,
            f.gate_up.n // 2,
            0,
            float(inner.norm.variance_epsilon),
            float(layers[0].self_attn.scaling),
            inner.embed_tokens.weight.data_ptr(),
            inner.norm.weight.data_ptr(),
            self._layers,
            proj_form(self._head),
        )
        self.keys = self.values = torch.empty(0, dtype=torch.bfloat16)
        self._grow(capacity)

    @property
    def capacity(self) -> int:
        return self._model.cap

    def _grow(self, need: int) -> None:
        """Buffers for at least `need` positions (doubling), the held positions copied; the rotary tables too."""
        m = self._model
        cap = max(need, 2 * m.cap)
        shape = (m.layers, m.kv_heads, cap, m.head_dim)
        keys, values = torch.empty(shape, dtype=torch.bfloat16), torch.empty(shape, dtype=torch.bfloat16)
        if self.length:
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values
        for i, c in enumerate(self._layers):
            c.kc, c.vc = keys[i].data_ptr(), values[i].data_ptr()
        # One pass over every position gives each position's rows bitwise as a pass over it alone does
        # (tests/test_step.py): the model's own rotary module, as its forward calls it.
        dummy = torch.empty(1, dtype=torch.bfloat16)
        with torch.inference_mode():
            cos, sin = self.model.model.rotary_emb(dummy, torch.arange(cap)[None])
        self.cos, self.sin = (t[0].to(torch.bfloat16).contiguous() for t in (cos, sin))
        m.cap = cap

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = max(0, min(self.length, length))

    def get_seq_length(self) -> int:
        """The positions held (DynamicCache's name for it: the engine and the tests read either cache so)."""
        return self.length

    def __call__(self, ids: torch.Tensor, logits: bool = True, keep: int | None = None) -> torch.Tensor:
        """The last position's logits (vocab,) bf16 after feeding ids (1, S) or (S,) on top of the cache (which
        then holds them); keep=n: the last n positions' logits (n, vocab), as HF's logits_to_keep=n gives them;
        logits=False: the final-norm hidden states instead ((hidden,), or (n, hidden))."""
        tokens = ids.reshape(-1).to(torch.int64)
        tokens = tokens if tokens.is_contiguous() else tokens.contiguous()
        S, n = tokens.numel(), keep or 1
        if S < 1 or not 1 <= n <= S:
            raise ValueError(f"the lean forward needs at least one token and keeps 1 to {S} positions, not {n}")
        if self.length + S > self.capacity:
            self._grow(self.length + S)
        pos = self.length
        if self.wide and wide_pass.rows() is not None and S >= wide_pass.rows():
            self.wide_passes += 1
            result = wide_pass.forward(self, tokens, n, logits)
            return result if keep else result[0]
        hidden = torch.empty(n, self._model.hidden, dtype=torch.bfloat16)
        out = torch.empty(n, self._head.n, dtype=torch.bfloat16) if logits else None
        rc = library().bi_model_step(
            ctypes.byref(self._model),
            tokens.data_ptr(),
            S,
            pos,
            self.cos[pos].data_ptr(),
            self.sin[pos].data_ptr(),
            n,
            hidden.data_ptr(),
            None if out is None else out.data_ptr(),
        )
        if rc:
            raise RuntimeError("the lean forward refused the pass (a projection form this build does not know)")
        self.length = pos + S
        result = hidden if out is None else out
        return result if keep else result[0]

    def tree(self, ids: torch.Tensor, positions: torch.Tensor, sees: torch.Tensor, keep: int) -> torch.Tensor:
        """A token tree's verification (or a draft's depth) in one call: logits (keep, vocab) of the last `keep`
        of the rows ids (S,) fed on top of the cache, row i at rotary position positions[i]; sees (S, W) bool says
        which of the last W positions (the fed rows, and cached tree nodes before them) row i sees (itself and its
        ancestors), every earlier one seen, as HF's 4D tree mask does."""
        tokens = ids.reshape(-1).to(torch.int64).contiguous()
        S, pos = tokens.numel(), self.length
        W = sees.shape[-1]
        if S < 1 or not 1 <= keep <= S or sees.shape != (S, W) or not S <= W <= pos + S or positions.numel() != S:
            raise ValueError(f"a tree pass takes S >= 1 rows, an (S, S..{pos + S}) mask, S positions, keeping 1 to {S}")
        if pos + S > self.capacity or int(positions.max()) >= self.capacity:
            self._grow(max(pos + S, int(positions.max()) + 1))
        allowed = torch.ones(S, pos + S, dtype=torch.uint8)
        allowed[:, pos + S - W :] = sees
        where = positions.reshape(-1).to(torch.int64)
        cos, sin = self.cos.index_select(0, where), self.sin.index_select(0, where)
        hidden = torch.empty(keep, self._model.hidden, dtype=torch.bfloat16)
        out = torch.empty(keep, self._head.n, dtype=torch.bfloat16)
        fn = library().bi_model_step_tree
        fn.argtypes, fn.restype = [_ptr, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _ptr, _ptr], ctypes.c_int
        ptrs = [t.data_ptr() for t in (tokens, cos, sin, allowed, hidden, out)]
        rc = fn(ctypes.byref(self._model), ptrs[0], S, pos, *ptrs[1:4], keep, *ptrs[4:])
        if rc:
            raise RuntimeError("the lean forward refused the tree pass (a projection form this build does not know)")
        self.length = pos + S
        return out

    def keep(self, start: int, positions: list[int]) -> None:
        """Keep the positions `positions` (in order) at start, start + 1, ... and nothing after them: a tree's
        accepted path moved into place, the rest cropped (kernels.step's counterpart of tree.keep_path)."""
        n = len(positions)
        if n and positions != list(range(start, start + n)):
            index = torch.tensor(positions)
            self.keys[:, :, start : start + n] = self.keys.index_select(2, index)
            self.values[:, :, start : start + n] = self.values.index_select(2, index)
        self.length = min(self.length, start + n)

    def load(self, cache) -> None:
        """Hold a copy of HF's DynamicCache's keys and values instead of what was held (a kept prefix: prefixes.py)."""
        n = cache.get_seq_length()
        if n > self.capacity:
            self._grow(n)
        for i, layer in enumerate(cache.layers):
            self.keys[i, :, :n] = layer.keys[0, :, :n]
            self.values[i, :, :n] = layer.values[0, :, :n]
        self.length = n

    def to_dynamic(self, config=None):
        """The held keys and values as HF's DynamicCache (copies), for a caller that goes on along HF's path
        (config: the model's, as the engine builds its cache with it)."""
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
        n = self.length
        for i in range(self._model.layers):
            k = self.keys[i, None, :, :n].clone()
            v = self.values[i, None, :, :n].clone()
            cache.update(k, v, i)
        return cache

    def nbytes(self) -> int:
        """Bytes of the key and value buffers (their capacity, held or not)."""
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


TargetCache = DynamicCache | LeanForward


def target_cache(target: PreTrainedModel, positions: int) -> TargetCache:
    """The target's cache for one sequence of up to `positions` positions: the lean forward's (one C call a pass,
    bitwise HF's logits: tests/test_step.py) where the target runs fused on the batch-invariant kernels, else HF's
    DynamicCache. A draft whose verify does not take it (Draft.lean False) takes the cache over (engine._verify)."""
    if why_not(target) is None:
        return LeanForward(target, capacity=positions)
    return DynamicCache(config=target.config)


def score(target: PreTrainedModel, feed: torch.Tensor, cache: TargetCache, keep: int) -> torch.Tensor:
    """The target's logits (keep, vocab) for the last `keep` of the tokens feed (1, S), fed on top of the cache
    (which then holds them): the one target pass of a chain's verification and of V(n)'s measurement."""
    if isinstance(cache, LeanForward):
        return cache(feed, keep=keep)
    return target(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=keep).logits[0]
