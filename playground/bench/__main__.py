"""python -m playground.bench"""

from playground.bench.cli import main

raise SystemExit(main())
