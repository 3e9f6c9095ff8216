"""The one way anything decodes: a RunSpec in, round records out.

The UI's tabs, the API, the benchmark, the sweep, the pair comparison, step-through and the tests
all call `Runner.run` (or `Runner.decoder` for one round at a time). The runner loads the pair
(through the shared model cache), pays the one-time costs outside the timed run (a warm-up once
per target and drafter, and the target's cost profile V(n) once per target), and builds the
decoder. Timing is the engine's: each record carries its draft and verify seconds, and
trace.summarize turns them into tokens/s, c, v, speedup, one definition each.
"""
from __future__ import annotations

import statistics
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Iterator

import torch

from playground import decoding, models, speed, theory
from playground.engine import SpeculativeDecoder
from playground.errors import PlaygroundError
from playground.models import LoadedPair
from playground.progress import Progress, quiet
from playground.records import RoundRecord
from playground.config import DecodeConfig, DrafterKind, KPolicy
from playground.spec import DrafterSpec, RunSpec, check_prompt

if TYPE_CHECKING:  # the session's memory of earlier runs, for suffix decoding: the runner only passes it on
    from playground.decoding.suffix import SuffixMemory

WARM_PROMPT = "Hello"
PROFILE_NS = (1, 2, 3, 5, 9, 17)  # V(n) measured at these n, linear in between (theory.CostProfile)


def encode_prompt(tokenizer, prompt: str, chat: bool = True) -> torch.Tensor:
    """The prompt as ids (1, L). Instruct models with a chat template get it applied (one user
    turn), others see the raw text."""
    check_prompt(prompt)
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    else:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
    if ids.shape[1] == 0:
        raise PlaygroundError("The prompt encodes to no tokens: type something else.")
    return ids


def drafter_confidence(decode: DecodeConfig) -> float:
    """The threshold a model drafter stops at: the config's under KPolicy.CONFIDENCE, else 0 (off)."""
    return decode.confidence if decode.policy is KPolicy.CONFIDENCE else 0.0


class Runner:
    """Loads, warms up, profiles and runs. One per app (or benchmark, or test session); what it
    remembers is keyed by the loaded model objects, weakly, so an evicted model is forgotten."""

    def __init__(self) -> None:
        self._warm: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {drafter key}
        self._verify: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {invariant: {n: V(n) s}}
        self._draft_s: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {drafter key: s/token}

    # ------------------------------------------------------------ loading

    @staticmethod
    def load(spec: RunSpec, progress: Progress = quiet) -> LoadedPair:
        draft = spec.pair.draft if spec.drafter.needs_draft_model else None
        return models.load_pair(draft, spec.pair.target, progress, spec.pair.target_precision, spec.drafter.precision,
                                same_tokenizer=spec.drafter.same_tokenizer)

    # ------------------------------------------------------------ one-time costs

    @staticmethod
    def _key(spec: DrafterSpec, pair: LoadedPair, invariant: bool) -> tuple:
        """A drafter's options (its precision is its model's: the model's id stands for it) and the kernels."""
        model = id(pair.draft) if spec.needs_draft_model else None
        return (replace(spec, precision=None), model, invariant)

    def is_warm(self, spec: RunSpec, pair: LoadedPair) -> bool:
        invariant = pair.kernels_for(spec.pair.invariant)
        return (self._key(spec.drafter, pair, invariant) in self._warm.get(pair.target, set())
                and invariant in self._verify.get(pair.target, {}))

    def warm_up(self, spec: RunSpec, pair: LoadedPair, progress: Progress = quiet) -> None:
        """Pay the first-run costs (kernel selection, allocator growth) on a few tokens outside any
        timed run, measure the target's V(n) once (per kernels: batch-invariant or stock) and the drafter's cost
        per drafted token."""
        invariant = pair.use_kernels(spec.pair.invariant)
        done = self._warm.setdefault(pair.target, set())
        for drafter in (DrafterSpec(DrafterKind.TARGET_ALONE), spec.drafter):
            key = self._key(drafter, pair, invariant)
            if key in done:
                continue
            progress(f"Warming up ({drafter.label}, once per model and drafter)", 0.0)
            warm = RunSpec(spec.pair, drafter, DecodeConfig(max_new_tokens=10, k=3), WARM_PROMPT, spec.chat)
            rounds = list(self._decoder(warm, pair))
            per_token = [r.draft_s / r.k for r in rounds[1:] if r.k]
            self._draft_s.setdefault(pair.target, {})[key] = statistics.median(per_token) if per_token else 0.0
            done.add(key)
        profiles = self._verify.setdefault(pair.target, {})
        if invariant not in profiles:
            pair.use_kernels(spec.pair.invariant)  # the warm-up runs set it too
            profiles[invariant] = speed.verify_profile(pair.target, PROFILE_NS, progress=progress)

    def profile(self, spec: RunSpec, pair: LoadedPair) -> theory.CostProfile | None:
        """The measured costs of this target and drafter (None before warm_up)."""
        invariant = pair.kernels_for(spec.pair.invariant)
        verify = self._verify.get(pair.target, {}).get(invariant)
        if verify is None:
            return None
        draft_s = self._draft_s.get(pair.target, {}).get(self._key(spec.drafter, pair, invariant), 0.0)
        return theory.CostProfile(dict(verify), draft_s)

    def step_s(self, pair: LoadedPair) -> float | None:
        """One target step on this machine, V(1), once profiled."""
        verify = self._verify.get(pair.target, {}).get(pair.invariant)
        return verify[1] if verify else None

    # ------------------------------------------------------------ running

    def _decoder(self, spec: RunSpec, pair: LoadedPair, memory: SuffixMemory | None = None) -> SpeculativeDecoder:
        pair.use_kernels(spec.pair.invariant)
        ids = encode_prompt(pair.tokenizer, spec.prompt, spec.chat)
        profile = self.profile(spec, pair) if spec.decode.policy is KPolicy.THEORY else None
        drafter = decoding.make_drafter(spec.drafter, pair, drafter_confidence(spec.decode), spec.decode.tree,
                                        lambda tokenizer: encode_prompt(tokenizer, spec.prompt, spec.chat)[0].tolist(),
                                        memory)
        return SpeculativeDecoder(pair.target, drafter, ids, spec.decode, pair.eos, profile)

    def decoder(self, spec: RunSpec, pair: LoadedPair, progress: Progress = quiet,
                memory: SuffixMemory | None = None) -> SpeculativeDecoder:
        """A ready decoder, warm: call step() for one round, or iterate it. memory: the session's memory of
        earlier runs (suffix decoding reads and extends it when its spec asks; warm-ups never touch it)."""
        if not self.is_warm(spec, pair):
            self.warm_up(spec, pair, progress)
        return self._decoder(spec, pair, memory)

    def rounds(self, spec: RunSpec, pair: LoadedPair, progress: Progress = quiet,
               memory: SuffixMemory | None = None) -> Iterator[RoundRecord]:
        """Run one spec on a loaded pair, round by round (the caller keeps the pair in use)."""
        return iter(self.decoder(spec, pair, progress, memory))

    def run(self, spec: RunSpec, progress: Progress = quiet, memory: SuffixMemory | None = None) -> Iterator[RoundRecord]:
        """Load (cached), warm up (once), and stream the rounds; the pair stays in use until the end."""
        pair = self.load(spec, progress)
        with pair.in_use():
            yield from self.rounds(spec, pair, progress, memory)

    def run_all(self, spec: RunSpec, progress: Progress = quiet, memory: SuffixMemory | None = None) -> list[RoundRecord]:
        return list(self.run(spec, progress, memory))


def new_tokens(rounds: list[RoundRecord]) -> list[int]:
    """The output of a run: the new tokens of its rounds, in order."""
    return [t for r in rounds for t in r.new_tokens]

