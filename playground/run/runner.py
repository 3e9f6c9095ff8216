"""The one way anything decodes: a RunSpec in, round records out.

The UI's tabs, the API, the benchmark, the sweep, the pair comparison, the challenges, step-through, the start-up
and the tests all decode through a session:

    with runner.session(spec, progress) as s:
        for event in s:          # load, kernels, warm-up: a status line before each step that takes time
            show(event)
        rounds = list(s.rounds())  # or s.decoder() for one round at a time; s.rounds(other_spec) on the same pair
        batch = s.batch(prompt_ids).run()  # or B prompts at once, on the batched engine (batch.py)
        for baseline, record in s.compare():  # or the run and its target alone, interleaved (s.segments)
            ...

The runner loads the pair
(through the shared model cache), pays the one-time costs outside the timed run (a warm-up once
per target and drafter, and the target's cost profile V(n) once per target), and builds the
decoder. Timing is the engine's: each record carries its draft and verify seconds, and
trace.summarize turns them into tokens/s, c, v, speedup, one definition each.
"""

from __future__ import annotations

import statistics
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from playground import decoding, models
from playground.core import theory
from playground.engine.batch import BatchedDecoder
from playground.engine import Loop, SpeculativeDecoder, speed, threads
from playground.core.errors import PlaygroundError
from playground.models import LoadedPair
from playground.run.prefixes import Prefixes
from playground.core.progress import Progress, quiet
from playground.core.records import RoundRecord
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import DrafterSpec, RunSpec, check_prompt
from playground.engine.treesize import TreeCosts

WARM_PROMPT = "Hello"
PROFILE_NS = (1, 2, 3, 5, 9, 17)  # V(n) measured at these n, linear in between (theory.CostProfile)
# An interleaved comparison's segment: about this many new tokens of each side in turn. Short enough that a change
# of load mid-run falls on both sides alike; long enough that a segment's tokens/s is more than a round's noise.
SEGMENT_TOKENS = 8


def encode_prompt(tokenizer, prompt: str, chat: bool = True) -> torch.Tensor:
    """The prompt as ids (1, L). Instruct models with a chat template get it applied (one user
    turn), others see the raw text."""
    check_prompt(prompt)
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
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
    remembers is keyed by the loaded model objects, weakly, so an evicted model is forgotten. The way in is
    session(); loading, warming up and building a decoder are its steps (private here)."""

    def __init__(self) -> None:
        self._warm: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {drafter key}
        self._verify: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {invariant: {n: V(n) s}}
        self._draft_s: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {drafter key: s/token}
        self._draft_passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {key: {n: Vd(n) s}}
        self._warm_batch: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {(draft, k, invariant)}
        self.threads = threads.Fit()  # every round's thread count, fitted to the cores other processes leave
        self.prefixes = Prefixes()  # the target's cache of the example prompt, kept by the start-up

    # ------------------------------------------------------------ loading

    @staticmethod
    def _load(spec: RunSpec, progress: Progress = quiet) -> LoadedPair:
        draft = spec.pair.draft if spec.drafter.needs_draft_model else None
        return models.load_pair(
            draft,
            spec.pair.target,
            progress,
            spec.pair.target_precision,
            spec.drafter.precision,
            same_tokenizer=spec.drafter.same_tokenizer,
        )

    # ------------------------------------------------------------ one-time costs

    @staticmethod
    def _key(spec: DrafterSpec, pair: LoadedPair, invariant: bool) -> tuple:
        """A drafter's options (its precision is its model's: the model's id stands for it) and the kernels."""
        model = id(pair.draft) if spec.needs_draft_model else None
        return (spec.but(precision=None) if spec.precision else spec, model, invariant)

    def _is_warm(self, spec: RunSpec, pair: LoadedPair) -> bool:
        invariant = pair.kernels_for(spec.pair.invariant)
        key = self._key(spec.drafter, pair, invariant)
        sized = not _sized(spec) or key in self._draft_passes.get(pair.target, {})
        return key in self._warm.get(pair.target, set()) and invariant in self._verify.get(pair.target, {}) and sized

    def _warm_up(self, spec: RunSpec, pair: LoadedPair, progress: Progress = quiet) -> None:
        """Pay the first-run costs (kernel selection, allocator growth) on a few tokens outside any
        timed run, measure the target's V(n) once (per kernels: batch-invariant or stock) and the drafter's cost
        per drafted token; for a sized token tree, the draft's passes over n rows too (its Vd(n))."""
        invariant = pair.use_kernels(spec.pair.invariant)
        done = self._warm.setdefault(pair.target, set())
        for drafter in (DrafterSpec.target_alone(), spec.drafter):
            key = self._key(drafter, pair, invariant)
            if key in done:
                continue
            progress(f"Warming up ({drafter.label}, once per model and drafter)", 0.0)
            warm = RunSpec(
                spec.pair, drafter, DecodeConfig(max_new_tokens=10, k=3, policy=KPolicy.FIXED), WARM_PROMPT, spec.chat
            )
            rounds = list(self._build(warm, pair, progress=progress))
            per_token = [r.draft_s / r.k for r in rounds[1:] if r.k]
            self._draft_s.setdefault(pair.target, {})[key] = statistics.median(per_token) if per_token else 0.0
            done.add(key)
        profiles = self._verify.setdefault(pair.target, {})
        if invariant not in profiles:
            pair.use_kernels(spec.pair.invariant)  # the warm-up runs set it too
            self.threads.release()  # V(n) on every core, whatever the warm-up's rounds were fitted to
            profiles[invariant] = speed.verify_profile(pair.target, PROFILE_NS, progress=progress)
        passes = self._draft_passes.setdefault(pair.target, {})
        key = self._key(spec.drafter, pair, invariant)
        if _sized(spec) and key not in passes:
            model = decoding.make_drafter(spec.drafter, pair).model  # a tree's drafter is a model drafter
            progress("Measuring the draft's passes over n rows (a sized token tree)", 0.0)
            passes[key] = speed.verify_profile(model, PROFILE_NS)

    def _warm_up_batch(self, pair: LoadedPair, prompts: list[list[int]], k: int, progress: Progress = quiet) -> None:
        """The batched engine's first-run costs (its padded caches and masks), paid on two rows and a few tokens
        once per model, k and kernels, for the target alone (k = 0) and for k."""
        done = self._warm_batch.setdefault(pair.target, set())
        for warm_k in (0, k):
            key = (id(pair.draft) if warm_k else None, warm_k, pair.invariant)
            if key not in done:
                progress("Warming up the batched engine", 0.0)
                BatchedDecoder(pair.target, pair.draft, (prompts * 2)[:2], warm_k, 4, pair.eos).run()
                done.add(key)

    def _tree_costs(self, spec: RunSpec, pair: LoadedPair) -> TreeCosts | None:
        """What a sized token tree plans with: the target's V(n) and the draft's Vd(n) (None before warm_up)."""
        invariant = pair.kernels_for(spec.pair.invariant)
        verify = self._verify.get(pair.target, {}).get(invariant)
        draft = self._draft_passes.get(pair.target, {}).get(self._key(spec.drafter, pair, invariant))
        return TreeCosts(dict(verify), dict(draft)) if verify and draft else None

    def _profile(self, spec: RunSpec, pair: LoadedPair) -> theory.CostProfile | None:
        """The measured costs of this target and drafter (None before warm_up)."""
        invariant = pair.kernels_for(spec.pair.invariant)
        verify = self._verify.get(pair.target, {}).get(invariant)
        if verify is None:
            return None
        draft_s = self._draft_s.get(pair.target, {}).get(self._key(spec.drafter, pair, invariant), 0.0)
        return theory.CostProfile(dict(verify), draft_s)

    # ------------------------------------------------------------ running

    def _build(
        self, spec: RunSpec, pair: LoadedPair, kept: Any = None, progress: Progress = quiet, prefix: bool = False
    ) -> SpeculativeDecoder:
        """A decoder of the spec on the pair as it is (warm or not). prefix: start from the prompt's kept prefill
        where there is one (prefixes.py; the Run tab's runs)."""
        kernels = pair.use_kernels(spec.pair.invariant)
        ids = encode_prompt(pair.tokenizer, spec.prompt, spec.chat)
        profile = self._profile(spec, pair) if spec.decode.policy is KPolicy.THEORY else None
        drafter = decoding.make_drafter(
            spec.drafter,
            pair,
            drafter_confidence(spec.decode),
            spec.decode.tree,
            lambda tokenizer: encode_prompt(tokenizer, spec.prompt, spec.chat)[0].tolist(),
            kept,
            progress,
            self._tree_costs(spec, pair) if _sized(spec) else None,
        )
        # fitted threads only where every model runs the kernels: there the thread count changes no bit; elsewhere
        # the load is only read (each round's record keeps it)
        exact = kernels and threads.exact_on_any_threads(pair.draft)
        fit = self.threads if exact else self.threads.watch
        self.threads.restart()
        decoder = SpeculativeDecoder(pair.target, drafter, ids, spec.decode, pair.eos, profile, fit)
        start = self.prefixes.find(pair.target, ids) if prefix and kernels else None  # the example prompt's
        if start is not None:
            decoder.start_from(start)
        return decoder

    def _decoder(
        self, spec: RunSpec, pair: LoadedPair, progress: Progress = quiet, kept: Any = None, prefix: bool = False
    ) -> SpeculativeDecoder:
        """A ready decoder, warm (Session.decoder, Session.rounds): call step() for one round, or iterate it. kept:
        the browser session's state for the spec's drafter kind (Strategy.session; suffix decoding reads and
        extends its memory of earlier runs when its spec asks; warm-ups never touch it)."""
        if not self._is_warm(spec, pair):
            self._warm_up(spec, pair, progress)
        return self._build(spec, pair, kept, progress, prefix)

    def session(
        self,
        spec: RunSpec,
        progress: Progress = quiet,
        kept: Any = None,
        warm: bool = True,
        fast_verify: bool | None = None,
        check: Callable[[], None] | None = None,
        prefix: bool = False,
    ) -> Session:
        """`with runner.session(spec) as s:` the one way to decode: iterating s loads the pair (cached), sets the
        target's kernels and warms up (once per model and drafter), yielding a status event before each step;
        then s.rounds() / s.decoder() run on the warm pair, kept in use until the block ends. kept: the browser
        session's state for the spec's drafter kind (SessionState.kept). warm=False: load and kernels only (a peer
        that decodes with its own engine on our models). fast_verify: set speed.fast_verify on the target (True /
        False; None leaves it). check: called after every round (a job that nobody listens to ends there). prefix:
        a run of a prompt whose prefill the start-up kept starts from it (prefixes.py): the Run tab's runs, not a
        comparison with a peer that prefills."""
        return Session(self, spec, progress, kept, warm, fast_verify, check, prefix)


@dataclass(frozen=True)
class Event:
    """A step of a session that takes time: "load" or "warm-up", and what to show while it runs."""

    step: str
    message: str


@dataclass
class Session:
    """A RunSpec's pair, loaded, on its kernels and warm (Runner.session)."""

    runner: Runner
    spec: RunSpec
    progress: Progress = quiet
    kept: Any = None  # the browser session's state for the spec's drafter kind
    warm: bool = True
    fast_verify: bool | None = None
    check: Callable[[], None] | None = None
    prefix: bool = False  # start from the prompt's kept prefill (prefixes.py)
    pair: LoadedPair | None = None
    invariant: bool = False  # the target runs the batch-invariant kernels
    segments: list[tuple[int, int]] = field(default_factory=list)  # compare(): (its rounds, the baseline's) per segment
    _held: list = field(default_factory=list)  # the pair's in_use() context, exited with the session

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.threads.release()
        while self._held:
            self._held.pop().__exit__(None, None, None)
        models.trim_heap()  # the run's freed caches and activations back to the system (glibc), not kept resident

    def __iter__(self) -> Iterator[Event]:
        """Load, kernels, warm-up, each announced before it runs; nothing to do once done."""
        spec = self.spec
        if self.pair is None:
            names = [
                models.display_name(m)
                for m in (spec.pair.target, spec.pair.draft if spec.drafter.needs_draft_model else None)
                if m
            ]
            yield Event("load", "Loading " + " and ".join(names))
            pair = self.runner._load(spec, self.progress)
            held = pair.in_use()  # the model cache never evicts a pair while a session holds it
            held.__enter__()
            self._held.append(held)
            self.pair = pair
            if self.fast_verify is not None:
                speed.fast_verify(pair.target, self.fast_verify)
            self.invariant = pair.use_kernels(spec.pair.invariant)
        if self.warm and not self.runner._is_warm(spec, self.pair):  # warms the target alone too
            yield Event("warm-up", "Warming up and measuring this machine's V(n) (once per model and drafter)")
            self.runner._warm_up(spec, self.pair, self.progress)

    def load(self) -> LoadedPair:
        """The pair loaded and on its kernels, not warm yet (a caller that checks sizes before paying the warm-up)."""
        for event in self:
            if event.step == "warm-up":  # announced, not run: the next iteration (ready()) runs it
                break
        return self.pair

    def ready(self) -> Session:
        """Every step done, without showing them."""
        for _ in self:
            pass
        return self

    def profile(self, spec: RunSpec | None = None) -> theory.CostProfile | None:
        """The measured costs of the target and the spec's drafter (None before the warm-up measured them)."""
        return self.runner._profile(spec or self.spec, self.ready().pair)

    def tree_costs(self, spec: RunSpec | None = None) -> TreeCosts | None:
        """What a sized token tree of the spec plans with (None before the warm-up measured them)."""
        return self.runner._tree_costs(spec or self.spec, self.ready().pair)

    def warmed(self, spec: RunSpec | None = None) -> bool:
        """Whether the spec's first run pays no warm-up: its target and drafter are warm, its costs measured."""
        return self.runner._is_warm(spec or self.spec, self.load())

    def keep_prefix(self, prompt: str) -> None:
        """Prefill the target on the prompt once and keep its cache for the prompt's later runs (prefixes.py), where
        the target runs the batch-invariant kernels."""
        pair = self.ready().pair
        if pair.use_kernels(self.spec.pair.invariant):
            self.runner.prefixes.keep(pair.target, encode_prompt(pair.tokenizer, prompt, self.spec.chat))

    def decoder(self, spec: RunSpec | None = None) -> SpeculativeDecoder:
        """A decoder of the session's spec (or another spec on the same pair), for one round at a time."""
        spec = spec or self.spec
        kept = self.kept if spec is self.spec else None
        decoder = self.runner._decoder(spec, self.ready().pair, self.progress, kept, self.prefix)
        return _Checked(decoder, self.check) if self.check is not None else decoder

    def rounds(self, spec: RunSpec | None = None) -> Iterator[RoundRecord]:
        """The rounds of the session's spec (or of another spec on the same pair: its baseline, a variant)."""
        yield from self.decoder(spec)  # built when the first round is asked for

    def batch(
        self, prompts: list[list[int]], k: int | None = None, max_new_tokens: int | None = None
    ) -> BatchedDecoder:
        """B prompts (token ids) decoded together on the session's pair (batch.py: greedy, fixed k; k = 0: the target
        alone), warm; k and max_new_tokens default to the spec's. Iterating it calls the session's check."""
        decode, pair = self.spec.decode, self.ready().pair
        k = decode.k if k is None else k
        self.runner._warm_up_batch(pair, prompts, k, self.progress)
        new = decode.max_new_tokens if max_new_tokens is None else max_new_tokens
        decoder = BatchedDecoder(pair.target, pair.draft, prompts, k, new, pair.eos)
        return _Checked(decoder, self.check) if self.check is not None else decoder

    def compare(
        self, spec: RunSpec | None = None, segment_tokens: int = SEGMENT_TOKENS
    ) -> Iterator[tuple[bool, RoundRecord]]:
        """The spec's run and the target alone's on the same prompt, interleaved so that both share whatever else
        the machine does: the speculative decoder runs rounds until it has segment_tokens more new tokens, then
        the target alone runs until it has caught up to the same output length, and so on; each side keeps its
        own decoder (its KV caches, the drafter's state) between its segments. Yields (is_baseline, record) as the
        rounds come; self.segments gets (speculative rounds, target-alone rounds) per segment (trace.summarize's
        `segments`). When one side has ended (EOS: sampled texts may end apart), the other goes on alone."""
        spec = spec or self.spec
        sides = (self.decoder(spec), self.decoder(spec.baseline()))
        self.segments = []
        while not all(d.done for d in sides):
            counts = [0, 0]
            goal = _length(sides[0]) + segment_tokens  # the speculative side's segment
            for i, decoder in enumerate(sides):
                while not decoder.done and _length(decoder) < goal:
                    record = decoder.step()
                    counts[i] += 1
                    if self.check is not None:
                        self.check()
                    yield bool(i), record
                # the target alone catches up to the speculative side; once that has ended, it goes on alone
                goal = _length(sides[0]) if counts[0] else _length(sides[1]) + segment_tokens
            self.segments.append((counts[0], counts[1]))


def _length(decoder: SpeculativeDecoder | _Checked) -> int:
    """New tokens a decoder has produced so far."""
    return decoder.ids.shape[1] - decoder.prompt_len


class _Checked:
    """A decoder (one prompt's or a batch's) whose iteration calls `check` after every round; the rest is the
    decoder's own. The one per-round check wrapper: a session's check (a job nobody listens to ends there)."""

    def __init__(self, decoder: Loop, check: Callable[[], None]) -> None:
        self._decoder, self._check = decoder, check

    def __getattr__(self, name: str) -> object:
        return getattr(self._decoder, name)

    def __iter__(self) -> Iterator[RoundRecord]:
        for record in self._decoder:
            self._check()
            yield record


def _sized(spec: RunSpec) -> bool:
    """Whether the spec drafts a token tree shaped by the measured costs (sized, confidence) around a model drafter (a
    strategy that grows its own tree, suffix decoding, takes a sized tree's cap as a dynamic tree's budget)."""
    s = decoding.strategy(spec.drafter.kind)
    return spec.decode.tree is not None and spec.decode.tree.costed and s.tree and not s.own_tree


def new_tokens(rounds: list[RoundRecord]) -> list[int]:
    """The output of a run: the new tokens of its rounds, in order."""
    return [t for r in rounds for t in r.new_tokens]
