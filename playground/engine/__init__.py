"""The one decoding loop: propose, verify in one target pass, keep the accepted prefix.

Used by the UI, the benchmark and the tests alike. The autoregressive baseline is the same loop with a
drafter that proposes nothing, so both are timed the same way. The engine names no strategy: a drafter
(playground.decoding) proposes, its draft verifies itself against the target (a chain, or a token tree),
and the engine times the round, cuts it at EOS and at the token budget (`cut`) and plans the next k. The loop
itself (`Loop.step`: plan, propose, verify, keep) is written once, here; a batch of prompts (batch.BatchedDecoder)
runs through it too, with its own drafter and state for B rows.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.core import theory
from playground.core.draft import Drafter
from playground.core.errors import PlaygroundError
from playground.engine.cache import kept_bytes
from playground.kernels.step import LeanForward, target_cache
from playground.core.records import RoundRecord
from playground.core.sizes import Tally
from playground.core.config import DecodeConfig, KPolicy, K_MAX, K_MIN

PROBE_EVERY = 8  # THEORY's pause drafts one probe token after this many plain steps in a row


class KSchedule:
    """Draft length per round.

    - FIXED: always k.
    - CONFIDENCE: always k, as the most a draft may hold: the model drafter itself stops a draft when
      its top probability falls under DecodeConfig.confidence (the runner builds it so).
    - HEURISTIC: transformers' schedule, +2 after a fully accepted round, -1 otherwise.
    - THEORY: the k in 0..K_MAX with the best calibrated expected speedup,
      E(alpha, k) / (k c + v(k)) (theory.calibrated_speedup), for alpha estimated from this run's
      recent rounds and the costs of a CostProfile. k = 0 (a plain target step) is allowed: when
      drafting does not pay, the run stops drafting, and tries again as the evidence decays
      (theory.AcceptanceEstimate): the floor that keeps it at about the target alone's speed. After
      PROBE_EVERY plain steps in a row it drafts one token (a probe): without new evidence the estimate
      would rest at its prior, and a pause chosen on a costly start (a slow warm-up) would never end.
      With a profile fixed at the start (the runner measures one per model and drafter), the k
      sequence depends only on the accepted counts, so a seeded run is reproducible; without
      one, the profile is built from this run's own timings (and then depends on them).
    All but THEORY's pause stay within [K_MIN, K_MAX].
    """

    def __init__(self, k: int, policy: KPolicy = KPolicy.FIXED, profile: theory.CostProfile | None = None):
        self.k, self.policy, self.profile = k, KPolicy(policy), profile
        self.alpha = theory.AcceptanceEstimate()
        self._draft_s = 0.0
        self._drafted = 0
        self._plain = 0  # rounds in a row THEORY chose not to draft
        self._verify_s: dict[int, float] = {}  # n -> EMA of seconds, when no profile was given

    def update(
        self, drafted: int, accepted: int, draft_s: float = 0.0, verify_s: float = 0.0, first: bool = False
    ) -> None:
        if self.policy in (KPolicy.FIXED, KPolicy.CONFIDENCE):
            return
        if self.policy is KPolicy.HEURISTIC:
            if drafted:
                self.k = min(K_MAX, self.k + 2) if accepted == drafted else max(K_MIN, self.k - 1)
            return
        self.alpha.update(drafted, accepted)
        profile = self.profile or self._own_profile(drafted, draft_s, verify_s, first)
        if profile is None:
            return
        c = profile.c if self.profile else self._draft_s / max(1, self._drafted) / profile.step_s
        self.k = theory.best_k_calibrated(self.alpha.alpha, c, profile, K_MAX, k_min=0)
        self._plain = self._plain + 1 if self.k == 0 else 0
        if self._plain > PROBE_EVERY:  # a pause that has lasted: draft one token to learn this text's alpha again
            self.k, self._plain = 1, 0

    def _own_profile(self, drafted: int, draft_s: float, verify_s: float, first: bool) -> theory.CostProfile | None:
        """A profile from this run's timings (the first round's pass includes the prompt: skipped)."""
        self._draft_s += draft_s
        self._drafted += drafted
        if not first:
            n = drafted + 1
            old = self._verify_s.get(n)
            self._verify_s[n] = verify_s if old is None else 0.7 * old + 0.3 * verify_s
        return theory.CostProfile(dict(self._verify_s)) if self._verify_s else None


def clock(device: torch.device) -> float:
    """perf_counter after the device's queued work is done (CUDA runs asynchronously): the one clock every
    timing reads (the engine's rounds, the batched engine's, V(n), the benchmark's wall clock)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def cut(tokens: list[int], eos: set[int], budget: int) -> tuple[list[int], str]:
    """What a round appends: at most `budget` tokens, up to and including the first EOS; and why the
    sequence ends there ("eos", "length", or "" when it goes on)."""
    kept = tokens[:budget]
    for i, t in enumerate(kept):
        if t in eos:
            return kept[: i + 1], "eos"
    return kept, "length" if len(kept) >= budget else ""


class Loop:
    """The one decoding loop, for one prompt (SpeculativeDecoder) and for B prompts at once (batch.BatchedDecoder).
    Each round: plan the draft length within the token budget, propose, verify in one target pass (the
    acceptance rule, acceptance.py), keep the accepted prefix cut at EOS and at the budget; the draft and the
    verification are timed on one clock. `step()` runs one round and returns its record; iterating runs to the end.
    A subclass says what each part does for its state (_plan, _propose, _verify, _keep)."""

    device: torch.device
    done: bool

    def __iter__(self) -> Iterator:
        while not self.done:
            yield self.step()

    @torch.inference_mode()
    def step(self):
        if self.done:
            raise RuntimeError("generation already finished")
        k = self._plan()
        t0 = clock(self.device)
        draft = self._propose(k)
        t1 = clock(self.device)
        verdict = self._verify(draft, k)  # the target's one pass and the acceptance rule
        t2 = clock(self.device)
        return self._keep(verdict, t1 - t0, t2 - t1)

    def _plan(self) -> int:
        """This round's draft length (a round yields at most k + 1 tokens: k < the budget)."""
        raise NotImplementedError

    def _propose(self, k: int) -> Any:
        raise NotImplementedError

    def _verify(self, draft: Any, k: int) -> Any:
        raise NotImplementedError

    def _keep(self, verdict: Any, draft_s: float, verify_s: float) -> Any:
        """Append what the verdict keeps (engine.cut), update the state, and return the round's record."""
        raise NotImplementedError


class SpeculativeDecoder(Loop):
    """State of one generation: the target's KV cache (a model drafter keeps its own), the sequence, the k schedule.

    Invariant between rounds: each cache holds every position of `ids` but the last.
    """

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: Drafter,
        input_ids: torch.Tensor,
        config: DecodeConfig,
        eos_token_ids: set[int] | None = None,
        profile: theory.CostProfile | None = None,
        threads: Callable[[], tuple[int, float]] | None = None,
    ):
        """profile: the costs the THEORY k policy plans with (fixed for the run; see KSchedule). threads: called
        before each round to fit the thread count to the cores other processes leave, or only to read their load
        (playground/engine/threads.py: Fit, Fit.watch); it returns (threads, load), which the round's record keeps."""
        if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
            raise PlaygroundError("The prompt is empty: type something to continue.")
        window = getattr(target.config, "max_position_embeddings", None)
        if window and input_ids.shape[1] + config.max_new_tokens > window:
            raise PlaygroundError(
                f"Prompt ({input_ids.shape[1]} tokens) plus max_new_tokens ({config.max_new_tokens}) "
                f"exceeds the model's context window of {window} tokens."
            )
        self.target, self.drafter, self.config = target, drafter, config
        self.device = target.device
        self.ids = input_ids.to(self.device)
        self.prompt_len = input_ids.shape[1]
        if eos_token_ids is None:  # default: what the target's generation config says
            eos = target.generation_config.eos_token_id
            eos_token_ids = {eos} if isinstance(eos, int) else set(eos or ())
        self.eos = set(eos_token_ids)
        self.params = config.sampling
        self.schedule = KSchedule(config.k, config.policy, profile)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.cache = target_cache(target, self.prompt_len + config.max_new_tokens + K_MAX + 1)
        self.cached = 0
        self.rounds: list[RoundRecord] = []
        self._rounds_bytes = Tally()  # each round counted once, when nbytes() first sees it
        self.done = False
        self.threads = threads
        self._threads = (0, 0.0)  # this round's (threads, load), read in _plan
        drafter.reset()

    def start_from(self, cache: DynamicCache) -> None:
        """Start from a cache that holds every prompt position but the last (prefixes.py): the first round then
        feeds the target the prompt's last token and the draft only."""
        if self.rounds or cache.get_seq_length() != self.prompt_len - 1:
            raise ValueError("a kept prefix holds the prompt but its last token, and comes before the first round")
        if isinstance(self.cache, LeanForward):
            self.cache.load(cache)
        else:
            self.cache = cache
        self.cached = self.prompt_len - 1

    def nbytes(self) -> int:
        """Bytes this sequence keeps (the sessions' budget counts a step-through run by it): its ids, the target's
        cache, its rounds and the drafter's state (Drafter.nbytes); never the models' weights. No walk: each round
        is counted once, the caches by their buffers."""
        ids = self.ids.untyped_storage().nbytes()
        return ids + kept_bytes(self.cache) + self._rounds_bytes.of(self.rounds) + self.drafter.nbytes()

    @property
    def new_tokens(self) -> list[int]:
        return self.ids[0, self.prompt_len :].tolist()

    def _plan(self) -> int:
        budget = self.config.max_new_tokens - (self.ids.shape[1] - self.prompt_len)  # >= 1
        self._threads = self.threads() if self.threads is not None else (0, 0.0)  # read before the round's clock
        return min(self.drafter.depth(self.schedule.k), budget - 1)

    def _propose(self, k: int) -> Any:
        return self.drafter.propose(self.ids, k, self.params, self.generator)

    def _verify(self, draft: Any, k: int) -> RoundRecord:
        # The target's one pass and the acceptance rule; its cache keeps the accepted prefix (never recomputed).
        if isinstance(self.cache, LeanForward) and not draft.lean:  # a tree's mask: HF's path from here on
            self.cache = self.cache.to_dynamic(self.target.config)
        return draft.verify(self.target, self.cache, self.ids, self.cached, self.config, self.generator)

    def _keep(self, record: RoundRecord, draft_s: float, verify_s: float) -> RoundRecord:
        length = self.ids.shape[1]
        record.draft_s, record.verify_s = draft_s, verify_s
        record.round, record.prefill = len(self.rounds), length - self.cached - 1
        record.threads, record.load = self._threads
        self.drafter.observe(record.accepted)
        self.drafter.annotate(record)
        self.schedule.update(record.k, record.accepted, record.draft_s, record.verify_s, first=record.round == 0)
        return self._finish(record, length)

    def _finish(self, record: RoundRecord, length: int) -> RoundRecord:
        """Append the round's kept tokens (cut at EOS and at the token limit) and record it."""
        budget = self.config.max_new_tokens - (length - self.prompt_len)
        new, record.stop = cut(record.draft_tokens[: record.accepted] + [record.token], self.eos, budget)
        self.ids = torch.cat([self.ids, torch.tensor([new], dtype=self.ids.dtype, device=self.device)], dim=1)
        record.new_tokens = new
        record.margins = record.margins[: len(new)]
        record.total_new = self.ids.shape[1] - self.prompt_len
        self.done = bool(record.stop)
        self.cached = length + record.accepted  # the caches hold every position of ids but the last
        self.rounds.append(record)
        return record
