"""Run the cheapest form of every tox environment that `.ci/run` does not run in full.

Each environment is set up by tox exactly as `tox.ini` declares it (its extras, its
pins, its `commands_pre`), and its own commands, as `tox config` resolves them, run with
one change each so that they stay cheap:

- `collect`: pytest stops after collection (`--collect-only`), so every option it was
  given must parse and every selected test module must import;
- `dry-run`: `python -m harness` checks every option as a run would and runs nothing
  (`--dry-run`);
- `full`: the command runs as declared.

An environment `tox.ini` lists that is neither guarded here nor run by `.ci/run` fails
the guard: a new environment needs a line in `GUARDS`.

Each environment holds its own torch and triton, about 2 GB; ten of them do not fit on a
machine with little disk. `--discard` removes each environment's directory once its
guard has run (`.ci/run` does), and `--discard-only` removes the named ones and runs
nothing.

    python3 scripts/guard_tox_envs.py                 # every guarded environment
    python3 scripts/guard_tox_envs.py bench slow      # some of them
    python3 scripts/guard_tox_envs.py --discard       # each removed once guarded
    python3 scripts/guard_tox_envs.py --discard-only tests lint  # remove, run nothing
"""

from __future__ import annotations

import argparse
import enum
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Form(enum.Enum):
    """What one command of an environment becomes in its cheapest form."""

    COLLECT = "collect"
    DRY_RUN = "dry-run"
    FULL = "full"


@dataclass(frozen=True)
class Guard:
    """The cheapest form of one environment: the form of its pytest commands (the suite
    twice included) and of its `python -m harness` commands; every other command runs
    as declared."""

    pytest: Form = Form.FULL
    harness: Form = Form.FULL


RUN_BY_CI = ("tests", "lint", "type", "upstream")  # .ci/run runs these in full

GUARDS: dict[str, Guard] = {
    "slow": Guard(pytest=Form.COLLECT),
    "twice": Guard(pytest=Form.COLLECT),
    "report": Guard(),  # the main job itself: about 10 s past set-up
    "bench": Guard(),  # each benchmark's rounds, saved in a scratch store
    "vllm": Guard(pytest=Form.COLLECT, harness=Form.DRY_RUN),
    "releases": Guard(pytest=Form.COLLECT, harness=Form.DRY_RUN),
}

EXTRA_ARGS = {Form.COLLECT: ["--collect-only", "-q"], Form.DRY_RUN: ["--dry-run"], Form.FULL: []}


def tox(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tox", *args],
        cwd=ROOT,
        check=False,
        text=True,
        capture_output=capture,
    )


def listed_environments() -> list[str]:
    """Every environment `tox.ini` declares, default or additional (`tox list`)."""
    listing = tox("list", "--no-desc", capture=True)
    if listing.returncode != 0:
        raise SystemExit(f"tox list failed:\n{listing.stderr}")
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()]


def config_value(environment: str, key: str) -> list[str]:
    """The value of `key` for `environment` as tox resolves it, one entry per line (a
    multi-line value such as `commands` continues on indented lines)."""
    config = tox("config", "-e", environment, "-k", key, capture=True)
    if config.returncode != 0:
        raise SystemExit(f"tox config -e {environment} failed:\n{config.stderr}")
    lines = config.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
    first = lines[start].removeprefix(f"{key} =").strip()
    rest = [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]
    return [entry for entry in [first, *rest] if entry]


def discard(environment: str) -> None:
    """Remove the directory tox set `environment` up in (its `env_dir`), if any."""
    (env_dir,) = config_value(environment, "env_dir")
    shutil.rmtree(env_dir, ignore_errors=True)
    free_gb = shutil.disk_usage(ROOT).free / 2**30
    print(f"== {environment}: removed {env_dir} ({free_gb:.1f} GB free)", flush=True)


def declared_commands(environment: str) -> list[str]:
    """The environment's `commands`, each resolved by tox (default posargs included)."""
    return config_value(environment, "commands")


def kind_of(command: str) -> str:
    """`pytest` for a pytest run (the suite-twice script included), `harness` for a
    `python -m harness` run, else `other`."""
    words = shlex.split(command)
    if words[0] == "pytest" or words[:2] == ["python", "scripts/run_suite_twice.py"]:
        return "pytest"
    if words[:3] == ["python", "-m", "harness"]:
        return "harness"
    return "other"


def cheapest(command: str, *, guard: Guard, scratch: Path) -> tuple[str, Form]:
    """`command` in the form `guard` gives its kind, and that form; a benchmark run
    saves into `scratch` rather than the checkout's own history."""
    kind = kind_of(command)
    form = {"pytest": guard.pytest, "harness": guard.harness}.get(kind, Form.FULL)
    extra = list(EXTRA_ARGS[form])
    if "--benchmark-autosave" in shlex.split(command):
        extra.append(f"--benchmark-storage=file://{scratch}")
    return " ".join([command, *(shlex.quote(word) for word in extra)]), form


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    wall_s: float
    forms: str  # each command's kind and form, in order


def run_guard(environment: str, *, scratch: Path) -> Outcome:
    """Set `environment` up as declared and run its cheapest form."""
    declared = declared_commands(environment)
    cheap = [cheapest(command, guard=GUARDS[environment], scratch=scratch) for command in declared]
    commands = [command for command, _ in cheap]
    print(f"== {environment}: " + " && ".join(commands), flush=True)
    started = time.perf_counter()
    overridden = f"testenv:{environment}.commands=" + "\n".join(commands)
    outcome = tox("run", "-e", environment, "-x", overridden)
    forms = ", ".join(
        f"{kind_of(c)} {form.value}" for c, (_, form) in zip(declared, cheap, strict=True)
    )
    return Outcome(outcome.returncode, time.perf_counter() - started, forms)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("environments", nargs="*", help="default: every guarded environment")
    parser.add_argument(
        "--discard",
        action="store_true",
        help="remove each environment's directory once its guard has run",
    )
    parser.add_argument(
        "--discard-only",
        action="store_true",
        help="remove the named environments' directories and run nothing",
    )
    args = parser.parse_args(argv)
    listed = listed_environments()
    if args.discard_only:
        unknown = [name for name in args.environments if name not in listed]
        if unknown or not args.environments:
            print(
                f"error: --discard-only needs environments tox.ini lists ({', '.join(listed)})"
                + (f"; not listed: {', '.join(unknown)}" if unknown else ""),
                file=sys.stderr,
            )
            return 2
        for environment in args.environments:
            discard(environment)
        return 0
    unguarded = [name for name in listed if name not in GUARDS and name not in RUN_BY_CI]
    if unguarded:
        print(
            f"error: tox environment(s) {', '.join(unguarded)} neither guarded nor run by "
            "CI: add a Guard to GUARDS in scripts/guard_tox_envs.py",
            file=sys.stderr,
        )
        return 1
    stale = [name for name in GUARDS if name not in listed]
    chosen = args.environments or [name for name in listed if name in GUARDS]
    unknown = [name for name in chosen if name not in GUARDS]
    if stale or unknown:
        print(
            f"error: guarded but not in tox.ini: {', '.join(stale)}"
            if stale
            else f"error: not a guarded environment: {', '.join(unknown)}; "
            f"expected some of {', '.join(GUARDS)}",
            file=sys.stderr,
        )
        return 2
    results: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="tox-guard-") as scratch:
        for environment in chosen:
            results[environment] = run_guard(environment, scratch=Path(scratch))
            if args.discard:
                discard(environment)
    print(f"\n{'environment':<12} {'exit':>4} {'wall':>8}  commands")
    for environment, outcome in results.items():
        wall = f"{outcome.wall_s:.1f} s"
        print(f"{environment:<12} {outcome.exit_code:>4} {wall:>8}  {outcome.forms}")
    failed = [name for name, outcome in results.items() if outcome.exit_code != 0]
    print(f"guarded environments: {len(results)}; failing: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
