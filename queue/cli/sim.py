"""`gangq sim`: replay a trace against admission policies and print what each does.

Owns the command line only: choosing the trace (a generated scenario by seed and load, or a
file), the progress bar on stderr, running every scenario's goal figures (`--scenario all`,
optionally in several processes), and printing a table or one JSON object. The simulation
lives in `gangq.queue.sim`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import yaml

from gangq.queue import config
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import Policy
from gangq.queue.sim import (
    engine,
    families,
    goals,
    load,
    policy,
    reference,
    report,
    scenarios,
    trace,
)

_BAR_WIDTH = 30


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="trace-driven simulation of admission policies",
        description="Replay a trace on a virtual clock against gangq's core and baselines.",
    )
    parser.add_argument(
        "--scenario",
        default="reference",
        help=f"a generated scenario ({', '.join(scenarios.NAMES)}), 'all' of them with the "
        "goal figures, or a trace file (.yaml, .jsonl); see docs/sim.md",
    )
    parser.add_argument(
        "--policy",
        default="gangq",
        help=f"comma-separated policies or 'all': {', '.join(policy.POLICY_NAMES)} (default gangq)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of a generated trace")
    parser.add_argument(
        "--seeds",
        metavar="A-B",
        help="run the generated trace for each seed from A to B; report each and the worst",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a `gangq run` settings file: its tiers, policy knobs and tenants are replayed",
    )
    parser.add_argument(
        "--days", type=int, default=7, help="simulated days of a generated trace (default 7)"
    )
    parser.add_argument(
        "--load",
        metavar="L",
        help="offered load of a generated trace: device-hours asked / capacity over its length "
        f"(default: the reference and mixed weeks' own, {families.DEFAULT_LOAD} for a family)",
    )
    parser.add_argument(
        "--loads",
        metavar="L1,L2",
        help=f"with --scenario all: the offered loads to run (default {','.join(ALL_LOADS)})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="with --scenario all: run the traces in N processes (default 1)",
    )
    parser.add_argument(
        "--no-elastic",
        action="store_true",
        help="replay every job without its minReplicas, at its replicas only, to compare the "
        "same trace with and without elastic jobs",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot", type=Path, metavar="PNG", help="write a PNG, one panel per policy"
    )
    parser.add_argument(
        "--progress", action="store_true", help="show the progress bar even when stderr is no TTY"
    )
    parser.add_argument(
        "--write-trace", type=Path, metavar="YAML", help="also save the trace replayed, as YAML"
    )
    parser.set_defaults(handler=run)


ALL = "all"
ALL_LOADS = ("0.9", "1.15")
MAX_LOAD = 3.0


def _check_scenario(args: argparse.Namespace) -> None:
    """A name that is neither a scenario nor a file with a trace suffix is a typo, not a file."""
    name = str(args.scenario)
    if name in (*scenarios.NAMES, ALL) or Path(name).suffix or Path(name).exists():
        return
    raise InvalidInputError(
        f"unknown scenario {name!r}; choose from {', '.join(scenarios.NAMES)}, {ALL} "
        "or a trace file (.yaml, .jsonl)"
    )


def _generated(args: argparse.Namespace) -> bool:
    return args.scenario in (*scenarios.NAMES, ALL)


def _offered(text: str, *, option: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise InvalidInputError(f"{option}: expected a number, got {text!r}") from error
    if not 0 < value <= MAX_LOAD:
        raise InvalidInputError(
            f"{option}: expected a load above 0 and at most {MAX_LOAD:g}, got {text}"
        )
    return value


def _load_option(args: argparse.Namespace) -> float | None:
    if args.load is None:
        return None
    if not _generated(args):
        raise InvalidInputError("--load needs a generated scenario; a trace file has its own load")
    return _offered(args.load, option="--load")


def _loads(args: argparse.Namespace) -> list[float]:
    """`--scenario all`'s loads: `--loads`, else `--load`, else `ALL_LOADS`."""
    option, parts = "--loads", list(ALL_LOADS)
    if args.loads is not None:
        if args.load is not None:
            raise InvalidInputError("give --loads or --load, not both")
        parts = args.loads.split(",")
    elif args.load is not None:
        option, parts = "--load", [args.load]
    return list(dict.fromkeys(_offered(part.strip(), option=option) for part in parts))


def _check_days(days: int) -> None:
    if not 1 <= days <= 366:
        raise InvalidInputError(f"--days must be between 1 and 366, got {days}")


def _load(args: argparse.Namespace, *, seed: int) -> trace.Trace:
    offered = _load_option(args)
    if args.scenario in scenarios.NAMES:
        _check_days(args.days)
        loaded = scenarios.generate(args.scenario, seed=seed, days=args.days, offered=offered)
    else:
        loaded = trace.load(Path(args.scenario))
    return loaded.without_elastic() if args.no_elastic else loaded


def _seeds(args: argparse.Namespace) -> list[int] | None:
    """`--seeds 1-5` as [1, 2, 3, 4, 5]; None without the option."""
    if args.seeds is None:
        return None
    if not _generated(args):
        raise InvalidInputError(
            f"--seeds needs a generated scenario ({', '.join(scenarios.NAMES)} or {ALL})"
        )
    first, _, last = args.seeds.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError as error:
        raise InvalidInputError(f"--seeds: expected A-B, got {args.seeds!r}") from error
    if not 0 <= low <= high or high - low >= 100:
        raise InvalidInputError(f"--seeds: expected A-B with A <= B, at most 100, got {args.seeds}")
    return list(range(low, high + 1))


def _configured(
    config_file: Path | None, replayed: trace.Trace
) -> tuple[trace.Trace, Policy | None]:
    """The trace with the settings file's tenants (when it lists any) and gangq's policy from
    its tiers and knobs, so a quota admin can replay a week with a real configuration."""
    if config_file is None:
        return replayed, None
    settings = config.load(config_file=config_file)
    device_class = replayed.cluster.device_class
    quotas = tuple(
        quota
        for tenant in settings.tenants
        for quota in tenant.to_core()
        if quota.device_class == device_class
    )
    if quotas:
        known = {quota.tenant for quota in quotas}
        missing = sorted({job.tenant for job in replayed.jobs} - known)
        if missing:
            raise InvalidInputError(
                f"{config_file}: tenants {', '.join(missing)} of the trace have no quota for "
                f"{device_class}"
            )
        replayed = dataclasses.replace(replayed, quotas=quotas)
    return replayed, settings.policy()


def _check_writable(path: Path | None, *, option: str) -> None:
    """Fail before a long run rather than after it."""
    if path is not None and not path.parent.resolve().is_dir():
        raise InvalidInputError(f"{option}: folder {path.parent} does not exist")


class ProgressBar:
    """`[#####.....]  42% gangq` redrawn in place on a terminal."""

    def __init__(self, stream: TextIO, *, label: str) -> None:
        self.stream = stream
        self.label = label
        self.shown = -1

    def __call__(self, fraction: float) -> None:
        percent = int(100 * min(max(fraction, 0.0), 1.0))
        if percent == self.shown:
            return
        self.shown = percent
        filled = _BAR_WIDTH * percent // 100
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self.stream.write(f"\r[{bar}] {percent:3d}% {self.label}")
        if percent == 100:
            self.stream.write("\n")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    _check_scenario(args)
    names = policy.parse_names(args.policy)
    _check_writable(args.plot, option="--plot")
    _check_writable(args.write_trace, option="--write-trace")
    seeds = _seeds(args)
    if args.scenario == ALL:
        return _run_all(args, seeds=seeds or [args.seed])
    if args.loads is not None:
        raise InvalidInputError("--loads needs --scenario all; one scenario takes --load")
    if seeds is not None:
        return _run_seeds(args, names=names, seeds=seeds)
    replayed, settings = _configured(args.config, _load(args, seed=args.seed))
    if args.write_trace is not None:
        try:
            args.write_trace.write_text(
                yaml.safe_dump(trace.to_document(replayed), sort_keys=False)
            )
        except OSError as error:
            raise InvalidInputError(f"--write-trace: {error.strerror}") from error
    show_progress = args.progress or sys.stderr.isatty()
    outcomes = []
    for name in names:
        chosen = policy.create(name, device_class=replayed.cluster.device_class, settings=settings)
        bar = ProgressBar(sys.stderr, label=name) if show_progress else None
        outcomes.append(engine.simulate(replayed, chosen, on_progress=bar))
    summaries = {outcome.policy: report.summarize(outcome) for outcome in outcomes}
    if args.plot is not None:
        from gangq.queue.sim import plot

        plot.write(outcomes, args.plot)
    scenario = str(args.scenario)
    if args.json:
        document = {
            "scenario": scenario,
            "seed": args.seed if _generated(args) else None,
            "offered_load": load.offered_load(replayed),
            "horizon_s": replayed.horizon_s,
            "jobs": len(replayed.jobs),
            "capacity": replayed.cluster.capacity,
            "policies": summaries,
        }
        print(json.dumps(document))
        return 0
    days = replayed.horizon_s / reference.DAY
    print(
        f"scenario {scenario}: {len(replayed.jobs)} jobs over {days:.1f} days on "
        f"{replayed.cluster.nodes} nodes x {replayed.cluster.devices_per_node} devices"
    )
    print(report.table(summaries))
    if args.plot is not None:
        print(f"plot written to {args.plot}")
    return 0


def _run_seeds(args: argparse.Namespace, *, names: tuple[str, ...], seeds: list[int]) -> int:
    """Each seed's generated week through every policy; then each policy's worst figures."""
    show_progress = args.progress or sys.stderr.isatty()
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in seeds:
        replayed, settings = _configured(args.config, _load(args, seed=seed))
        by_seed[seed] = {}
        for name in names:
            chosen = policy.create(
                name, device_class=replayed.cluster.device_class, settings=settings
            )
            label = f"{name} seed {seed}"
            bar = ProgressBar(sys.stderr, label=label) if show_progress else None
            by_seed[seed][name] = report.summarize(
                engine.simulate(replayed, chosen, on_progress=bar)
            )
    worst = {name: report.worst([by_seed[seed][name] for seed in seeds]) for name in names}
    if args.json:
        document = {
            "scenario": str(args.scenario),
            "seeds": {str(seed): {"policies": by_seed[seed]} for seed in seeds},
            "worst": worst,
        }
        print(json.dumps(document))
        return 0
    print(f"scenario {args.scenario}, seeds {seeds[0]}-{seeds[-1]}, {args.days} days each")
    print(report.seeds_table(by_seed, worst=worst))
    return 0


def _goal_row(
    scenario: str,
    seed: int,
    offered: float,
    days: int,
    config_file: Path | None,
    *,
    elastic: bool,
) -> dict[str, Any]:
    """One scenario's trace through gangq and both FIFOs, reduced to the goal figures; a
    module-level function so that worker processes can run it."""
    generated = scenarios.generate(scenario, seed=seed, days=days, offered=offered)
    if not elastic:
        generated = generated.without_elastic()
    replayed, settings = _configured(config_file, generated)
    device_class = replayed.cluster.device_class
    summaries = {
        name: report.summarize(
            engine.simulate(
                replayed, policy.create(name, device_class=device_class, settings=settings)
            )
        )
        for name in goals.POLICIES
    }
    return {
        "scenario": scenario,
        "seed": seed,
        "load": offered,
        "offered_load": load.offered_load(replayed),
        "jobs": len(replayed.jobs),
        **goals.figures(summaries),
    }


def _run_all(args: argparse.Namespace, *, seeds: list[int]) -> int:
    """Every generated scenario, seed and load through gangq and both FIFOs: one goal row each,
    then each scenario's worst figures."""
    if args.policy != "gangq":
        raise InvalidInputError(
            f"--scenario {ALL} runs {', '.join(goals.POLICIES)}; leave out --policy"
        )
    if args.plot is not None or args.write_trace is not None:
        raise InvalidInputError(f"--plot and --write-trace take one scenario, not {ALL}")
    if args.jobs < 1:
        raise InvalidInputError(f"--jobs must be at least 1, got {args.jobs}")
    _check_days(args.days)
    loads = _loads(args)
    elastic = not args.no_elastic
    cells = [
        (scenario, seed, offered, args.days, args.config)
        for scenario in scenarios.NAMES
        for seed in seeds
        for offered in loads
    ]
    show_progress = args.progress or sys.stderr.isatty()
    bar = ProgressBar(sys.stderr, label=ALL) if show_progress else None
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    if args.jobs == 1:
        for cell in cells:
            rows.append(_goal_row(*cell, elastic=elastic))
            if bar is not None:
                bar(len(rows) / len(cells))
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(_goal_row, *cell, elastic=elastic) for cell in cells]
            for future in futures:
                rows.append(future.result())
                if bar is not None:
                    bar(len(rows) / len(cells))
    worst = {
        scenario: goals.worst([row for row in rows if row["scenario"] == scenario])
        for scenario in scenarios.NAMES
    }
    wall_s = time.monotonic() - started
    if args.json:
        document = {
            "scenario": ALL,
            "days": args.days,
            "seeds": seeds,
            "loads": loads,
            "policies": list(goals.POLICIES),
            "rows": rows,
            "worst": worst,
            "wall_s": wall_s,
        }
        print(json.dumps(document))
        return 0
    print(
        f"scenarios {', '.join(scenarios.NAMES)}; seeds {seeds[0]}-{seeds[-1]}, loads "
        f"{', '.join(f'{offered:g}' for offered in loads)}, {args.days} days each; "
        f"{wall_s:.0f} s"
    )
    print(goals.table(rows, worst=worst))
    return 0
