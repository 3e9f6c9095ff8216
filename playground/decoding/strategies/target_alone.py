"""The target alone: no draft (the baseline). No options."""

from __future__ import annotations

from dataclasses import dataclass

from playground.config import DrafterKind
from playground.decoding.options import Build, Strategy


@dataclass(frozen=True)
class Options:
    label = ""  # the kind's name alone


def build(b: Build):
    from playground.decoding.lookup import NoDrafter

    return NoDrafter()


STRATEGY = Strategy(DrafterKind.TARGET_ALONE, build, pickable=False)
