"""The example prompt's kept prefill (playground/run/prefixes.py): a run that starts from it decides every token with
the same probabilities as a run that prefills, on every kernel variant this CPU runs; it is used only for the kept
prompt, only on the kernels, and only before the first round."""

from __future__ import annotations

import dataclasses

import pytest
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.runner import Runner, encode_prompt
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()
pytestmark = pytest.mark.usefixtures("kernel_variant")

PROMPT = "def fibonacci(n): return the n-th number, with a docstring"
TIMES = {"draft_s", "verify_s", "prefill"}


def _spec(tiny_models, prompt: str = PROMPT, precision: str = "bf16", **decode) -> RunSpec:
    pair = PairSpec("tiny", str(tiny_models["target"]), str(tiny_models["draft"]), target_precision=precision)
    config = DecodeConfig(**{"max_new_tokens": 24, "k": 4, "policy": KPolicy.FIXED, **decode})
    return RunSpec(pair, DrafterSpec.of(DrafterKind.DRAFT_MODEL, precision=precision), config, prompt, chat=False)


def _rounds(runner: Runner, spec: RunSpec, keep: str | None = None) -> list:
    with runner.session(spec, prefix=True) as session:
        if keep is not None:
            session.keep_prefix(keep)
        return [dataclasses.asdict(r) for r in session.rounds()]


def _decisions(rounds: list) -> list:
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rounds]


@pytest.mark.parametrize("decode", [dict(), dict(temperature=0.8, seed=3)], ids=["greedy", "sampling"])
def test_a_kept_prefix_decides_every_token_as_a_prefill_does(tiny_models, decode):
    spec = _spec(tiny_models, **decode)
    plain = _rounds(Runner(), spec)
    kept = _rounds(Runner(), spec, keep=PROMPT)
    assert plain[0]["prefill"] > 0 and kept[0]["prefill"] == 0  # the kept run fed the target no prompt again
    assert _decisions(kept) == _decisions(plain)  # tokens, p, q, u, margins: the same bits


def test_only_the_kept_prompt_starts_from_it(tiny_models):
    runner = Runner()
    other = _rounds(runner, _spec(tiny_models, prompt="Once upon a time"), keep=PROMPT)
    assert other[0]["prefill"] > 0


def test_a_session_that_does_not_ask_prefills(tiny_models):
    """A comparison with a peer that prefills (bench, Compare pairs) does not start from the kept prefill."""
    runner = Runner()
    spec = _spec(tiny_models)
    with runner.session(spec) as session:
        session.keep_prefix(PROMPT)
        assert next(iter(session.rounds())).prefill > 0


def test_without_the_kernels_nothing_is_kept(tiny_models):
    """fp32 runs torch's kernels: a prompt fed alone may differ in its last bits from the same prompt fed with the
    draft, so no prefix is kept there."""
    runner = Runner()
    rounds = _rounds(runner, _spec(tiny_models, precision="fp32"), keep=PROMPT)
    assert rounds[0]["prefill"] > 0


def test_a_kept_prefix_is_refused_after_the_first_round(tiny_models):
    runner = Runner()
    with runner.session(_spec(tiny_models), prefix=True) as session:
        session.keep_prefix(PROMPT)
        decoder = session.decoder()
        decoder.step()
        pair = session.ready().pair
        ids = encode_prompt(pair.tokenizer, PROMPT, chat=False)
        first, second = runner.prefixes.find(pair.target, ids), runner.prefixes.find(pair.target, ids)
        assert first is not None and first is not second  # each decoder gets its own copy to extend and crop
        with pytest.raises(ValueError, match="before the first round"):
            decoder.start_from(first)
