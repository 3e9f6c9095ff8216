"""The target alone: no draft (the baseline). No options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import Context, Peer, Strategy

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair


@dataclass(frozen=True)
class Options:
    label = ""  # the kind's name alone


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    from playground.decoding.lookup import NoDrafter

    return NoDrafter()


STRATEGY = Strategy(
    DrafterKind.TARGET_ALONE,
    build,
    pickable=False,
    hf=Peer("target alone", bench=True),
    vllm=Peer("target alone", bench=True),
)
