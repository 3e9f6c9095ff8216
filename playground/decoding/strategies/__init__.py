"""One module per strategy: its Options (the checks, the label), WIDGETS (the UI's ranges, labels, help), NAMES
(the command line's short option names), build() and STRATEGY, the registry's entry (playground.decoding collects
them): everything the rest of playground/ knows of the strategy.

Adding one: a module here, in MODULES below. Options: a frozen dataclass (defaults, checks in __post_init__, a
label). WIDGETS: the sidebar's controls and the link's fields are built from them (Strategy.about: folded in the
options accordion under that note). build(options, pair, context) -> the Drafter (playground/core/draft.py); context
(options.Context): the confidence threshold, the prompt's encoder, an own token tree, the session's kept state.
STRATEGY: the capabilities, the command line's short name and positional option (Strategy.short, .positional; every
Options field is an option there by its own name too), an optional session-state factory (Strategy.session),
summary rows (Strategy.summary), and its peers (Strategy.hf, .vllm: which of transformers' or vLLM's adapters runs
it, or "none", with the note the export shows, and as data what each runs: options.Peer, read by the registry's
builders hf_generate and speculative_config; the export, the bench and vllm/ name no adapter).
tests/test_new_strategy.py adds a small one ("repeat the last n-gram") from outside the package.

Why not in the drafter modules (model.py, suffix.py, ...): those import torch, and the registry, the spec and the
UI must stay torch-free (tests/test_layering.py); each build() imports its drafter module when it is called."""

from __future__ import annotations

from playground.decoding.strategies import (
    cross,
    draft_model,
    early_exit,
    lookahead,
    prompt_lookup,
    self_quant,
    staged,
    suffix,
    target_alone,
)

# The registry's order: the UI's, the API's and the CLI's order of choices
MODULES = (draft_model, prompt_lookup, early_exit, self_quant, cross, staged, suffix, lookahead, target_alone)
