"""The cache of loaded models, shared across sessions within a memory budget, and pairs loaded from it."""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from playground.env import settings
from playground.kernels import model as kernel_model
from playground.core.errors import PlaygroundError
from playground.models.load import (
    check_compatible,
    choose_device,
    default_draft_precision,
    default_target_precision,
    draft_fallback,
    eos_ids,
    estimate_bytes,
    load_precision,
    memory_budget,
)
from playground.core.progress import Progress, quiet
from playground.core.config import Precision


class ModelCache:
    """Loaded models shared across sessions, within a memory budget.

    One load per spec even when asked for at once. When a new model does not fit, the least
    recently used models that no generation is using are evicted; a model that cannot fit even
    then is refused before loading, with a clear message. A model made from a loaded one (the self int4
    drafter's quantised copy of the target: derived()) is kept and counted beside it, and evicted with it.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._models: OrderedDict[tuple, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = OrderedDict()
        self._bytes: dict[tuple, int] = {}
        self._busy: dict[tuple, int] = {}
        self._loading: dict[tuple, threading.Lock] = {}
        self._derived: dict[tuple, PreTrainedModel] = {}  # key + (name,) -> a model made from the key's model
        self._fell_back: dict[tuple, tuple] = {}  # a default's key -> the key of the precision its model got

    @staticmethod
    def key(spec: str, precision: Precision | None = None) -> tuple:
        device = choose_device()
        return (spec.strip(), str(device), Precision(precision or default_target_precision(device)).value)

    def loaded(self) -> list[str]:
        with self._lock:
            return [k[0] for k in self._models]

    def get(self, spec: str, progress: Progress = quiet, precision: Precision | None = None):
        return self.get_precision(spec, progress, precision)[0]

    def get_precision(
        self,
        spec: str,
        progress: Progress = quiet,
        precision: Precision | None = None,
        fallback: Precision | None = None,
    ) -> tuple[tuple[PreTrainedModel, PreTrainedTokenizerBase], Precision]:
        """((model, tokenizer), the precision it got): `precision`, or `fallback` where the model refuses it (a
        default int4 draft: load.draft_fallback). The model is kept under the precision it got, and a precision that
        fell back is remembered: the default and that precision share one load."""
        asked = self.key(spec, precision)
        with self._lock:
            key = self._fell_back.get(asked, asked) if fallback else asked
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key], Precision(key[2])
            gate = self._loading.setdefault(asked, threading.Lock())
        with gate:
            with self._lock:
                key = self._fell_back.get(asked, asked) if fallback else asked
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key], Precision(key[2])
            need = estimate_bytes(spec, asked[2]) or 0
            self._make_room(spec, need)
            model, tokenizer, got = load_precision(spec, precision=asked[2], progress=progress, fallback=fallback)
            key = asked[:2] + (got.value,)
            with self._lock:
                if key != asked:
                    self._fell_back[asked] = key
                if key not in self._models:  # else the same precision was loaded meanwhile: that copy is kept
                    self._models[key] = (model, tokenizer)
                    self._bytes[key] = model_bytes(model)
                self._loading.pop(asked, None)
                return self._models[key], got

    def derived(self, model: PreTrainedModel, name: str, make: Callable[[], PreTrainedModel], need: int):
        """The model `make` builds from a loaded `model` (its own quantised copy), made once per loaded model and
        name, counted in the budget (`need` bytes before it is made, then its own: make() sets `_added_bytes`,
        what it holds beyond what it shares with `model`) and evicted with it. A model the cache does not hold:
        made each time, not kept."""
        with self._lock:
            base = next((k for k, (m, _) in self._models.items() if m is model), None)
            if base is None:
                return make()
            key = base + (name,)
            if key in self._derived:
                return self._derived[key]
            gate = self._loading.setdefault(key, threading.Lock())
            self._busy[base] = self._busy.get(base, 0) + 1  # making room must not evict the model it is made from
        try:
            with gate:
                with self._lock:
                    if key in self._derived:
                        return self._derived[key]
                self._make_room(f"{base[0]} ({name})", need)
                made = make()
                with self._lock:
                    self._derived[key] = made
                    self._bytes[key] = int(getattr(made, "_added_bytes", need))
                    self._loading.pop(key, None)
                return made
        finally:
            with self._lock:
                self._busy[base] -= 1

    def _family(self, key: tuple) -> list[tuple]:
        """A cached model's key and those of the models made from it (derived())."""
        return [key] + [d for d in self._derived if d[: len(key)] == key]

    def _make_room(self, spec: str, need: int) -> None:
        budget = memory_budget()
        with self._lock:
            used = sum(self._bytes.values())
            idle = [k for k in self._models if not self._busy.get(k)]  # least recently used first
            freeable = sum(self._bytes[f] for k in idle for f in self._family(k))
            if used - freeable + need > budget:
                gb = lambda b: f"{b / 2**30:.1f} GB"
                raise PlaygroundError(
                    f"Not enough memory for {spec!r}: it needs about {gb(need)}, the budget is {gb(budget)} and "
                    f"{gb(used - freeable)} is held by models in use. Try a smaller pair, or raise PLAYGROUND_MEMORY_GB."
                )
            for k in idle:
                if used + need <= budget:
                    break
                self._models.pop(k)
                for f in self._family(k):
                    self._derived.pop(f, None)
                    used -= self._bytes.pop(f)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @contextmanager
    def using(self, *models: tuple[str | None, Precision | None]):
        """Mark (spec, precision) models as in use (never evicted) for the duration of a generation."""
        keys = [self.key(spec, precision) for spec, precision in models if spec]
        with self._lock:
            for k in keys:
                self._busy[k] = self._busy.get(k, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for k in keys:
                    self._busy[k] -= 1

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self._derived.clear()
            self._fell_back.clear()
            self._bytes.clear()


MODELS = ModelCache()


def model_bytes(model: PreTrainedModel) -> int:
    """Bytes of a loaded model's weights (int8-packed Linear weights counted at one byte each; the int8 and int4
    drafts' kernel copies, kernels.model.quantize_int8 / quantize_int4, held outside its parameters)."""
    total = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    total += getattr(model, "_int8_bytes", 0) + getattr(model, "_int4_bytes", 0)
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if callable(weight):  # a dynamically quantised Linear keeps its weight packed
            total += weight().numel() + 4 * module.out_features
    return total


@dataclass
class LoadedPair:
    draft: PreTrainedModel | None
    target: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos: set[int]
    draft_spec: str | None = None
    target_spec: str = ""
    target_precision: Precision = Precision.FP32
    draft_precision: Precision | None = None
    draft_tokenizer: PreTrainedTokenizerBase | None = None

    def target_copy(self, name: str, make: Callable[[], PreTrainedModel], need: int) -> PreTrainedModel:
        """A model made from the target (the self int4 drafter's quantised copy), made once per loaded target and
        name and kept in the model cache beside it, its bytes counted in the budget (ModelCache.derived)."""
        return MODELS.derived(self.target, name, make, need)

    def in_use(self):
        """`with pair.in_use():` keeps both models from being evicted while a generation runs."""
        return MODELS.using((self.draft_spec, self.draft_precision), (self.target_spec, self.target_precision))

    def use_kernels(self, invariant: bool | None = None) -> bool:
        """Run the target on the batch-invariant kernels (True; None: $PLAYGROUND_INVARIANT) or on torch's stock
        kernels (False), where the invariant ones can run (bf16 on a CPU with AVX512-BF16); whether it now runs
        them. A switch is cheap (the modules' forwards), so each run sets what it asked for."""
        want = self.kernels_for(invariant)
        if kernel_model.can_make_invariant(self.target) is None and kernel_model.is_invariant(self.target) != want:
            kernel_model.make_invariant(self.target, want)
        return want

    def kernels_for(self, invariant: bool | None = None) -> bool:
        """Whether a run asking for `invariant` runs the batch-invariant kernels on this target (nothing switched)."""
        want = settings.read().invariant if invariant is None else invariant
        return bool(want) and kernel_model.can_make_invariant(self.target) is None

    @property
    def invariant(self) -> bool:
        """Whether the target runs the batch-invariant kernels now: greedy output is then exactly the target's."""
        return kernel_model.is_invariant(self.target)


def fast_verify_default() -> bool:
    """Whether fp32 targets on CPU use the short-row-block verify kernel: yes unless $PLAYGROUND_FAST_VERIFY=0."""
    return settings.read().fast_verify


def load_pair(
    draft_spec: str | None,
    target_spec: str,
    progress: Progress = quiet,
    target_precision: Precision | None = None,
    draft_precision: Precision | None = None,
    same_tokenizer: bool = True,
) -> LoadedPair:
    """Target (and draft, when given) from the shared cache at their precisions (None = this device's
    defaults; a default int4 draft whose shapes int4 refuses gets int8: the pair's draft_precision is the one it
    got); with same_tokenizer (the draft model drafter), the tokenizers are checked to agree."""
    device = choose_device()
    target_precision = Precision(target_precision or default_target_precision(device))
    target, tokenizer = MODELS.get(target_spec, progress, target_precision)
    draft = draft_tok = None
    if draft_spec:
        named = draft_precision is not None
        draft_precision = Precision(draft_precision or default_draft_precision(device))
        fallback = None if named else draft_fallback(draft_precision)
        with MODELS.using((target_spec, target_precision)):  # loading the draft must not evict the target
            (draft, draft_tok), draft_precision = MODELS.get_precision(draft_spec, progress, draft_precision, fallback)
        if same_tokenizer:
            check_compatible(draft_tok, tokenizer)
    else:
        draft_precision = None
    if fast_verify_default():
        from playground.engine.speed import fast_verify

        fast_verify(target)  # fp32 on CPU only: the verify kernel for k + 1 rows (playground/engine/speed.py)
    return LoadedPair(
        draft,
        target,
        tokenizer,
        eos_ids(target, tokenizer),
        draft_spec,
        target_spec,
        target_precision,
        draft_precision,
        draft_tok,
    )
