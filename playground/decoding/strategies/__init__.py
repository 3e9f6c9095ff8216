"""One module per strategy: its Options (the checks, the label), WIDGETS (the UI's ranges, labels, help), NAMES
(the command line's option names), build() and STRATEGY, the registry's entry (playground.decoding collects them).

Why not in the drafter modules (model.py, suffix.py, ...): those import torch, and the registry, the spec and the
UI must stay torch-free (tests/test_layering.py); each build() imports its drafter module when it is called."""

from __future__ import annotations

from playground.decoding.strategies import (
    cross,
    draft_model,
    early_exit,
    lookahead,
    prompt_lookup,
    staged,
    suffix,
    target_alone,
)

# The registry's order: the UI's, the API's and the CLI's order of choices
MODULES = (draft_model, prompt_lookup, early_exit, cross, staged, suffix, lookahead, target_alone)
