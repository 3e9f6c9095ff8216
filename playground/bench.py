"""`python -m playground.bench`: speculative decoding vs the target alone vs HF assisted generation.

Every configuration runs in one process on the same prompts; the baseline (target alone) goes
through the same engine and instrumentation, so speedups are ratios of like with like:

    speedup    = tokens/s of the configuration / tokens/s of the target alone (same prompt, temperature)
    vs HF      = tokens/s of our engine / tokens/s of HF `generate(assistant_model=...)`, same pair and k

Examples:
    python -m playground.bench                                  # default pair, k 2 4 6 adaptive, greedy
    python -m playground.bench --k 4 --temps 0 1 --compare-hf --json out.json
    python -m playground.bench --prompts my_prompts.json --pairs "tiny (test)"
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from playground import models, session, speed, theory, trace
from playground.engine import DecodeConfig, K_MAX, K_MIN
from playground.errors import PlaygroundError

PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that checks whether n is a prime number, with a docstring.",
    "story": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "qa": "What causes the seasons on Earth? Explain briefly.",
    "summarisation": (
        "Summarise in two sentences: Speculative decoding speeds up large language model inference. "
        "A small draft model proposes several tokens, and the large target model checks them all in "
        "a single forward pass. Accepted tokens are kept, and the first rejected token is replaced by "
        "the target's own choice, so the output matches what the target alone would produce."
    ),
    "translation": "Translate into French: The weather is nice today, so we are going to the beach with our friends.",
    "math": "Solve step by step: a train travels 120 km in 1.5 hours. What is its average speed in km/h?",
}


@dataclass
class Result:
    pair: str
    category: str
    method: str  # "target alone", "draft model", "prompt lookup", "hf assisted", "hf prompt lookup", "hf target alone"
    k: str  # "4", "adaptive", "" for baselines
    temperature: float
    tokens: int
    wall_s: float
    tokens_per_s: float
    speedup: float = float("nan")  # over our target-alone run of the same prompt and temperature
    alpha: float = float("nan")
    alpha_eval: float = float("nan")
    mean_accepted: float = float("nan")
    c: float = float("nan")  # draft time per token / one target step
    v: float = float("nan")  # verify time per round / one target step (Leviathan et al. assume 1)
    theory_speedup: float = float("nan")
    greedy_equal: bool | None = None  # temperature 0: output == target-alone output
    new_tokens: list[int] = field(default_factory=list)


def load_prompts(path: str | None) -> dict[str, str]:
    """Built-in prompts, or a JSON file: {"category": "prompt"} or [{"category", "prompt"}]."""
    if not path:
        return dict(PROMPTS)
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        return {str(k): str(v) for k, v in data.items()}
    return {str(item.get("category", f"prompt {i}")): str(item["prompt"]) for i, item in enumerate(data)}


def run_engine(pair: models.LoadedPair, kind: str, prompt: str, config: DecodeConfig,
               option: str | None = "fp32") -> tuple[list, list[int], float]:
    """One generation through the engine; returns (rounds, new tokens, wall seconds incl. prefill).
    option: the draft precision, or for the early-exit drafter its layer ("" = the default layer)."""
    start = time.perf_counter()
    if kind == session.EARLY_EXIT:
        dec = session.decoder(pair, kind, prompt, config, exit_layer=int(option) if option and option.isdigit() else None)
    else:
        dec = session.decoder(pair, kind, prompt, config, precision=option)
    rounds = list(dec)
    if pair.target.device.type == "cuda":
        torch.cuda.synchronize()
    return rounds, dec.new_tokens, time.perf_counter() - start


def run_hf(pair: models.LoadedPair, method: str, prompt: str, config: DecodeConfig) -> tuple[list[int], float]:
    """The peer: HF transformers generate, target alone or assisted (draft model / prompt lookup)."""
    ids = session.encode_prompt(pair.tokenizer, prompt).to(pair.target.device)
    kwargs: dict = dict(max_new_tokens=config.max_new_tokens, pad_token_id=pair.tokenizer.eos_token_id)
    if config.temperature > 0:
        kwargs.update(do_sample=True, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or None)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if method == "hf assisted":
        kwargs.update(assistant_model=pair.draft)
        if config.adaptive:
            pair.draft.generation_config.num_assistant_tokens_schedule = "heuristic"
        else:
            pair.draft.generation_config.num_assistant_tokens_schedule = "constant"
        pair.draft.generation_config.num_assistant_tokens = config.k
        pair.draft.generation_config.assistant_confidence_threshold = 0.0
    elif method == "hf prompt lookup":
        kwargs.update(prompt_lookup_num_tokens=config.k)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(ids, **kwargs)
    if pair.target.device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start


def k_config(k: str, temperature: float, max_new_tokens: int, seed: int) -> DecodeConfig:
    """k: a number, "adaptive" (the heuristic schedule) or "theory" (the theory-driven policy)."""
    adaptive = k in ("adaptive", "theory")
    return DecodeConfig(max_new_tokens=max_new_tokens, k=4 if adaptive else int(k), adaptive=adaptive,
                        policy="theory" if k == "theory" else "heuristic", temperature=temperature, seed=seed)


def split_drafter(name: str) -> tuple[str, str]:
    """"draft model:int8" -> ("draft model", "int8"); plain names use fp32 (the stock setup).
    "early exit:8" -> ("early exit", "8"), the layer; plain "early exit" -> ("early exit", "")."""
    kind, _, option = name.partition(":")
    return kind, option or ("" if kind == session.EARLY_EXIT else "fp32")


def bench(pair_names: list, prompts: dict[str, str], ks: list[str], temps: list[float], drafters: list[str],
          max_new_tokens: int = 64, compare_hf: bool = False, seed: int = 0, record: bool = True,
          progress: bool = True, fast_verify: bool = True) -> list[Result]:
    """Run the grid; the baseline of each (pair, prompt, temperature) runs first.

    HF runs always use the stock kernels (speed.fast_verify off), ours use `fast_verify`."""
    families = {split_drafter(d)[0] for d in drafters} - {session.EARLY_EXIT}  # HF peers: assisted, prompt lookup
    per_prompt = len(temps) * (1 + len(ks) * (len(drafters) + (len(families) if compare_hf else 0)) + compare_hf)
    bar = tqdm(total=len(pair_names) * len(prompts) * per_prompt, disable=not progress, file=sys.stderr,
               desc="bench", unit="run")
    results: list[Result] = []
    for name in pair_names:
        spec = name if isinstance(name, models.Pair) else models.get_pair(name)  # a catalog name or a custom pair
        name = spec.name
        pair = models.load_pair(spec.draft, spec.target, models.print_progress if progress else models._quiet)

        def ours(kind, prompt, cfg, precision="fp32"):
            speed.fast_verify(pair.target, fast_verify)
            return run_engine(pair, kind, prompt, cfg, precision)

        def peer(method, prompt, cfg):
            speed.fast_verify(pair.target, False)
            return run_hf(pair, method, prompt, cfg)

        warm = DecodeConfig(max_new_tokens=4, k=2)
        ours(session.TARGET_ALONE, "Hello", warm)  # first calls pay one-time costs: keep them out of the numbers
        for d in drafters:
            ours(split_drafter(d)[0], "Hello", warm, split_drafter(d)[1])
        if compare_hf:
            peer("hf assisted", "Hello", warm)
        for category, prompt in prompts.items():
            for temperature in temps:
                base_cfg = DecodeConfig(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, record=record)
                rounds, base_tokens, wall = ours(session.TARGET_ALONE, prompt, base_cfg)
                base_tps = len(base_tokens) / wall
                base_step_tps = trace.summarize(rounds)["tokens_per_s"]  # engine time only: one target step per token
                equal = (lambda tokens: tokens == base_tokens) if temperature == 0 else (lambda tokens: None)
                results.append(Result(name, category, session.TARGET_ALONE, "", temperature, len(base_tokens), wall,
                                      base_tps, speedup=1.0, new_tokens=base_tokens))
                bar.update()
                if compare_hf:
                    tokens, wall = peer("hf target alone", prompt, base_cfg)
                    results.append(Result(name, category, "hf target alone", "", temperature, len(tokens), wall,
                                          len(tokens) / wall, len(tokens) / wall / base_tps,
                                          greedy_equal=equal(tokens), new_tokens=tokens))
                    bar.update()
                for k in ks:
                    cfg = k_config(k, temperature, max_new_tokens, seed)
                    cfg.record = record
                    for d in drafters:
                        kind, precision = split_drafter(d)
                        rounds, tokens, wall = ours(kind, prompt, cfg, precision)
                        s = trace.summarize(rounds, base_step_tps)
                        tps = len(tokens) / wall
                        theory_speedup = float("nan")
                        if not math.isnan(s["c"]) and not math.isnan(s["alpha_eval"]):
                            theory_speedup = theory.speedup(s["alpha_eval"], max(1, round(s["mean_k"])), s["c"])
                        results.append(Result(
                            name, category, d, k, temperature, len(tokens), wall, tps, tps / base_tps,
                            s["alpha"], s["alpha_eval"], s["mean_accepted"], s["c"], s["v"], theory_speedup,
                            equal(tokens), tokens,
                        ))
                        bar.update()
                    if compare_hf:
                        for family in sorted(families):
                            method = "hf assisted" if family == session.DRAFT_MODEL else "hf prompt lookup"
                            tokens, wall = peer(method, prompt, cfg)
                            results.append(Result(name, category, method, k, temperature, len(tokens), wall,
                                                  len(tokens) / wall, len(tokens) / wall / base_tps,
                                                  greedy_equal=equal(tokens), new_tokens=tokens))
                            bar.update()
        speed.fast_verify(pair.target, models.fast_verify_default())  # as load_pair left it
    bar.close()
    return results


def record_overhead(pair_name: str, prompt: str, k: str, drafter: str, max_new_tokens: int, reps: int,
                    progress: bool = True) -> dict:
    """What the UI's per-token records cost: the same engine and settings with record on and off,
    interleaved `reps` times in this process; medians of tokens/s and the relative slowdown."""
    import statistics

    spec = models.get_pair(pair_name)
    pair = models.load_pair(spec.draft, spec.target, models.print_progress if progress else models._quiet)
    kind, precision = split_drafter(drafter)
    speed.fast_verify(pair.target, True)
    run_engine(pair, kind, "Hello", DecodeConfig(max_new_tokens=4, k=2), precision)
    tps: dict[bool, list[float]] = {True: [], False: []}
    for _ in tqdm(range(reps), disable=not progress, file=sys.stderr, desc="record on/off", unit="pair"):
        for record in (True, False):
            cfg = k_config(k, 0.0, max_new_tokens, 0)
            cfg.record = record
            _, tokens, wall = run_engine(pair, kind, prompt, cfg, precision)
            tps[record].append(len(tokens) / wall)
    speed.fast_verify(pair.target, models.fast_verify_default())  # as load_pair left it
    on, off = statistics.median(tps[True]), statistics.median(tps[False])
    return dict(drafter=drafter, k=k, reps=reps, record_on_tps=on, record_off_tps=off, overhead=(off - on) / off,
                runs_on=tps[True], runs_off=tps[False])


def fmt(x, digits: int = 2) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.{digits}f}"
    return str(x)


COLUMNS = ["pair", "category", "method", "k", "temperature", "tokens", "tokens_per_s", "speedup", "vs_hf",
           "alpha", "mean_accepted", "c", "v", "theory_speedup", "greedy_equal"]


def vs_hf(results: list[Result]) -> dict[int, float]:
    """Our tokens/s over HF's for the same pair, prompt, temperature, k and drafter family."""
    peer = {"draft model": "hf assisted", "prompt lookup": "hf prompt lookup", "target alone": "hf target alone"}
    index = {(r.pair, r.category, r.method, r.k, r.temperature): r for r in results}
    out = {}
    for i, r in enumerate(results):
        other = index.get((r.pair, r.category, peer.get(split_drafter(r.method)[0], ""), r.k, r.temperature))
        if other is not None:
            out[i] = r.tokens_per_s / other.tokens_per_s
    return out


def table(results: list[Result]) -> str:
    """A Markdown table, one row per run."""
    ratios = vs_hf(results)
    rows = [COLUMNS, ["---"] * len(COLUMNS)]
    for i, r in enumerate(results):
        d = asdict(r) | {"vs_hf": ratios.get(i, float("nan"))}
        rows.append([fmt(d[c]) for c in COLUMNS])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def aggregate(results: list[Result]) -> list[dict]:
    """Mean over prompts per (pair, method, k, temperature): the headline rows of a report."""
    import pandas as pd

    ratios = vs_hf(results)
    df = pd.DataFrame([asdict(r) | {"vs_hf": ratios.get(i, float("nan"))} for i, r in enumerate(results)])
    df["greedy_equal"] = df["greedy_equal"].map(lambda x: float(x) if x is not None else float("nan"))
    cols = ["tokens_per_s", "speedup", "vs_hf", "alpha", "mean_accepted", "c", "v", "theory_speedup", "greedy_equal"]
    grouped = df.groupby(["pair", "method", "k", "temperature"], sort=False)[cols].mean().reset_index()
    return grouped.to_dict("records")


PROSE = ("story",)


def targets(results: list[Result]) -> list[dict]:
    """The performance issue's targets, checked against this run (greedy runs of our engine only):
    [{target, best, value, met}], value nan when the run lacks what the target needs."""
    import pandas as pd

    ratios = vs_hf(results)
    df = pd.DataFrame([asdict(r) | {"vs_hf": ratios.get(i, float("nan"))} for i, r in enumerate(results)])
    df = df[(df["temperature"] == 0) & ~df["method"].str.startswith("hf") & (df["method"] != session.TARGET_ALONE)]
    df = df.assign(config=df["method"] + " k=" + df["k"], ratio=df["speedup"] / df["theory_speedup"])
    out = []

    def best(target: str, rows, column: str, goal: float, how: str = "max") -> None:
        rows = rows.dropna(subset=[column])
        if rows.empty:
            out.append(dict(target=target, best="(not in this run)", value=float("nan"), met=None))
            return
        if how == "max":
            row = rows.loc[rows[column].idxmax()]
            out.append(dict(target=target, best=f"{row['config']} ({row['category']})", value=row[column],
                            met=bool(row[column] >= goal)))
        else:  # the config whose worst value over the group is best
            worst = rows.groupby("config")[column].agg(how)
            out.append(dict(target=target, best=worst.idxmax(), value=worst.max(), met=bool(worst.max() >= goal)))

    best("code: speedup >= 1.6", df[df["category"] == "code"], "speedup", 1.6)
    adaptive = df[df["k"].isin(["adaptive", "theory"])]
    best("prose with adaptive k: speedup >= 1.1", adaptive[adaptive["category"].isin(PROSE)], "speedup", 1.1)
    best("adaptive k, every category: speedup >= 0.95 (worst category)", adaptive, "speedup", 0.95, "min")
    best("vs HF assisted, same k: >= 1.2 (mean over categories)", df, "vs_hf", 1.2, "mean")
    best("vs HF assisted, same k: >= 1.2 (worst category)", df, "vs_hf", 1.2, "min")
    best("measured / theory >= 0.85 (mean over categories)", df, "ratio", 0.85, "mean")
    return out


def report(results: list[Result], env: dict, command: str, path: Path) -> None:
    """docs/benchmarks.md with its plotly figures (HTML, next to it in figures/)."""
    import pandas as pd
    import plotly.express as px

    path.parent.mkdir(parents=True, exist_ok=True)
    figures = path.parent / "figures"
    figures.mkdir(exist_ok=True)
    ratios = vs_hf(results)
    df = pd.DataFrame([asdict(r) | {"vs_hf": ratios.get(i, float("nan"))} for i, r in enumerate(results)])
    ours = df[~df["method"].str.startswith("hf") & (df["method"] != session.TARGET_ALONE)]
    peers = df[df["method"].str.startswith("hf ") & (df["method"] != "hf target alone")]
    figs = {
        "speedup_vs_k": px.bar(pd.concat([ours, peers]), x="k", y="speedup", color="method", barmode="group",
                               facet_col="category", title="Speedup over the target alone, per prompt category"),
        "measured_vs_theory": px.scatter(ours, x="theory_speedup", y="speedup", color="category", symbol="method",
                                         hover_data=["k", "alpha", "c", "v"],
                                         title="Measured speedup vs Leviathan et al.'s theory (measured alpha, c)"),
        "alpha_per_category": px.bar(ours, x="category", y="alpha", color="method", barmode="group",
                                     facet_col="k", title="Acceptance rate alpha per category"),
    }
    for name, fig in figs.items():
        fig.write_html(figures / f"{name}.html", include_plotlyjs="cdn")
    agg = aggregate(results)
    head = ["method", "k", "temperature", "tokens_per_s", "speedup", "vs_hf", "alpha", "mean_accepted", "c", "v",
            "theory_speedup"]
    lines = [
        "# Benchmarks", "",
        f"Generated by `{command}` on {env['date']}, commit `{env['commit']}`: {env['device']}, {env['dtype']}, "
        f"torch {env['torch']}, {env['threads']} threads. Every number below comes from that one run.", "",
        "speedup = tokens/s over the target alone (same engine, same prompt); vs_hf = our tokens/s over HF "
        "transformers `generate(assistant_model=...)` on the same pair, prompt and k; c = draft cost per token "
        "and v = verify cost per round, both in target steps (Leviathan et al. assume v = 1); theory = "
        "(1 - a^(k+1)) / ((1 - a)(k c + 1)) for the measured a and c.", "",
        "## Mean over prompts", "",
        "| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * len(head)) + " |",
    ]
    if len({row["pair"] for row in agg}) > 1:
        head = ["pair"] + head
        lines[-2:] = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * len(head)) + " |"]
    for row in agg:
        lines.append("| " + " | ".join(fmt(row[c]) for c in head) + " |")
    lines += ["", "## Targets", "", "The performance targets, checked against this run (greedy; best configuration of "
              "our engine for each). Why the unmet ones are unmet, and which levers got how far: "
              "[levers.md](levers.md).", "", "| target | best configuration | value | met |", "| --- | --- | --- | --- |"]
    lines += [f"| {t['target']} | {t['best']} | {fmt(t['value'])} | {fmt(t['met'])} |" for t in targets(results)]
    lines += ["", "Figures: " + ", ".join(f"[{n}](figures/{n}.html)" for n in figs), "", "## Every run", "",
              table(results), ""]
    path.write_text("\n".join(lines))


def environment() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    device = models.choose_device()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else f"CPU, {os.cpu_count()} cores",
        "dtype": str(models.choose_dtype(device)).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "processor": platform.processor() or platform.machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.bench", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--pairs", nargs="+", default=[models.default_pair()], help="catalog pair names")
    parser.add_argument("--k", nargs="+", default=["2", "4", "6", "adaptive"], help=f"draft lengths {K_MIN}..{K_MAX}, 'adaptive' (heuristic schedule), 'theory' (theory-driven k)")
    parser.add_argument("--temps", nargs="+", type=float, default=[0.0])
    parser.add_argument("--drafters", nargs="+", default=[session.DRAFT_MODEL],
                        help="'draft model', 'prompt lookup', 'early exit'; 'draft model:int8' / ':bf16' for a "
                             "cheaper draft; 'early exit:L' to exit after layer L")
    parser.add_argument("--stock-kernels", action="store_true", help="our engine without the CPU verify kernel (speed.fast_verify)")
    parser.add_argument("--prompts", help="JSON file: {category: prompt} or [{category, prompt}]")
    parser.add_argument("--categories", nargs="+", help="only these categories of the prompt set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare-hf", action="store_true", help="add HF generate(assistant_model=...) on the same runs")
    parser.add_argument("--no-record", action="store_true", help="engine without the per-token p/q instrumentation")
    parser.add_argument("--record-overhead", type=int, metavar="REPS",
                        help="instead of the grid: the first drafter, k and prompt with record on and off, REPS times each")
    parser.add_argument("--json", help="write every result and the environment to this file")
    parser.add_argument("--report", help="write a Markdown report with plotly figures (e.g. docs/benchmarks.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        for d in args.drafters:
            kind, option = split_drafter(d)
            ok = option == "" or option.isdigit() if kind == session.EARLY_EXIT else option in speed.DRAFT_PRECISIONS
            if kind not in session.DRAFTERS or not ok:
                raise PlaygroundError(f"Unknown drafter {d!r}: use {list(session.DRAFTERS)}, optionally with "
                                      f":{'/:'.join(speed.DRAFT_PRECISIONS)} for the draft model, :L (a layer) for early exit.")
        for k in args.k:
            if k not in ("adaptive", "theory") and not (k.isdigit() and K_MIN <= int(k) <= K_MAX):
                raise PlaygroundError(f"--k takes whole numbers from {K_MIN} to {K_MAX}, 'adaptive' or 'theory', got {k!r}.")
        prompts = load_prompts(args.prompts)
        if args.categories:
            unknown = set(args.categories) - set(prompts)
            if unknown:
                raise PlaygroundError(f"Unknown categories {sorted(unknown)}; the prompt set has {sorted(prompts)}.")
            prompts = {c: prompts[c] for c in args.categories}
        if args.record_overhead:
            o = record_overhead(args.pairs[0], next(iter(prompts.values())), args.k[0], args.drafters[0],
                                args.max_new_tokens, args.record_overhead, not args.quiet)
            print(f"record on {o['record_on_tps']:.3f} tok/s, off {o['record_off_tps']:.3f} tok/s (medians of "
                  f"{o['reps']}): instrumentation costs {o['overhead']:.1%}")
            if args.json:
                Path(args.json).write_text(json.dumps({"environment": environment(), "record_overhead": o}, indent=1))
            return 0
        results = bench(args.pairs, prompts, args.k, args.temps, args.drafters, args.max_new_tokens,
                        args.compare_hf, args.seed, not args.no_record, not args.quiet, not args.stock_kernels)
    except PlaygroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = environment()
    print(f"\n{env['date']}  commit {env['commit']}  {env['device']}  {env['dtype']}  torch {env['torch']}\n")
    print(table(results))
    if args.json:
        ratios = vs_hf(results)
        doc = {"environment": env, "args": vars(args),
               "results": [asdict(r) | {"vs_hf": ratios.get(i)} for i, r in enumerate(results)]}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
        print(f"\nwrote {args.json}")
    if args.report:
        command = "python -m playground.bench " + " ".join(
            f'"{a}"' if " " in a else a for a in (argv if argv is not None else sys.argv[1:]))
        report(results, env, command, Path(args.report))
        print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
