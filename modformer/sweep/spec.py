"""A sweep: arms (variants) x hyperparameter grid x seeds, with the same grid for every arm.

A sweep file is a run config (sections model, task, train: the base of every run) plus a
`sweep` section::

    sweep:
      variants: [standard, frozen_qk, mixit]
      grid: {train.lr: [1.0e-3, 3.0e-3], train.batch_size: [128, 512]}
      seeds: [0, 1, 2]
      workers: 2
      launcher: local            # or slurm: one job array (sweep.slurm, modformer/sweep/slurm.py)

Every run is the base config with its variant, one grid point and its seed set (`model.variant`
and `train.seed` for the default kind of run).

An arm that needs settings of its own (a hybrid placement, an option or a loss weight only
it has) is named in a mapping instead of the list, each arm a name and what it sets::

    sweep:
      variants:
        standard: {}                          # the variant of that name
        rndembqk: {}
        rndembqk_alternate:                   # a name of yours: its folder, row and legend
          variant: rndembqk
          model.layers: {1: standard, 3: standard}
        mixit_wide: {variant: mixit, model.mixer_options.scale: 2.0}

An arm's keys are dotted config keys, set over the base before the grid point; a key the grid
also sets is refused, as are two arms that would train the same model (a standard arm and
a "hybrid" of standard layers, say).
All runs are built and checked before the first starts, so a bad grid key fails at once.
`sweep.experiment` says what a run is (`modformer/sweep/kinds.py`): `train` (the default),
or a kind a paper registers, whose variant and seed keys are its own (a list of arms, say).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from ..config import read_yaml
from ..configtools import apply_override, check_seeds, from_dict, option, set_dotted, to_dict
from ..errors import ConfigError
from ..point_names import file_safe, grid_points, point_names
from .kinds import RUN_KINDS, run_kind
from .sections import check_paper
from .slurm_config import Launcher, SlurmConfig
from .verdict import VerdictConfig
from ..version import RECORDS_FORMAT, records_format_problem


@dataclass
class SweepConfig:
    experiment: str = option("train", "what each run is: train (a `modformer train` run; its variant sets "
                                      "model.variant), or a kind a paper registers, with its own variant and seed keys "
                                      "(the kinds are listed below)")
    variants: list[str] | dict[str, dict[str, Any] | None] = option(
        default_factory=lambda: ["standard"],
        help="the arms to compare: a list of variants (model.variant, or the key of sweep.experiment's kind), or a "
             "mapping of arm names to what each sets: `variant` (default: the arm's name) and dotted config keys "
             "of its own, e.g. {hybrid: {variant: frozen_qk, model.layers: {-1: standard}}}")
    grid: dict[str, list[Any]] = option(
        default_factory=dict, help="dotted config key -> values; the same grid is run for every arm")
    seeds: list[int] = option(
        default_factory=lambda: [0, 1, 2],
        help="seeds of every (variant, grid point), distinct; fewer than 3 run, and the report warns that its "
             "intervals then mean little")
    workers: int = option(1, "runs trained at once, each in its own process")
    metric: str = option("accuracy", "validation metric that chooses each variant's best grid point")
    mode: Literal["max", "min"] = option("max", "max or min: whether a larger metric is better")
    launcher: Launcher = option("local", "local: `workers` processes on this machine; slurm: one Slurm job array")
    slurm: SlurmConfig = option(default_factory=SlurmConfig, help="what each run asks Slurm for (launcher slurm)")
    paper: str | None = option(None, "the paper whose experiment this sweep is (an installed paper plugin: modformer "
                                     "list), for "
                                     "a sweep its runs' construction does not already tie to it: the report adds "
                                     "that paper's sections (e.g. each run's budget against its reference scripts')")
    verdict: VerdictConfig = option(
        default_factory=VerdictConfig, help="the parameters of the verdicts its pages quote (a success threshold, an "
                                            "equality margin: modformer/sweep/verdict.py), part of its plan")

    def __post_init__(self) -> None:
        if not self.variants:
            raise ConfigError("sweep.variants must name at least one variant")
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise ConfigError(f"sweep.seeds must be distinct and non-empty, got {self.seeds}")
        check_seeds(self, "sweep", "seeds")
        if self.workers < 1:
            raise ConfigError(f"sweep.workers must be positive, got {self.workers}")
        if self.experiment not in RUN_KINDS:
            raise ConfigError(f"sweep.experiment must be one of {', '.join(RUN_KINDS)}, got '{self.experiment}' (a "
                              f"paper's kind comes with its plugin: `modformer list` names the papers installed)")
        if self.paper is not None:
            check_paper(self.paper)
        kind = RUN_KINDS[self.experiment]
        for key, values in self.grid.items():
            if key in (kind.variant_key, kind.seed_key):
                raise ConfigError(f"sweep.grid.{key}: set it with sweep.variants / sweep.seeds instead")
            if not isinstance(values, list) or not values:
                raise ConfigError(f"sweep.grid.{key} must be a non-empty list of values")
            seen = [json.dumps(v, sort_keys=True, default=repr) for v in values]
            if len(set(seen)) != len(seen):  # one folder would be trained twice
                twice = next(v for v, s in zip(values, seen) if seen.count(s) > 1)
                raise ConfigError(f"sweep.grid.{key} names {twice!r} twice: each value once")
        if isinstance(self.variants, list) and len(set(self.variants)) != len(self.variants):
            twice = next(v for v in self.variants if self.variants.count(v) > 1)
            raise ConfigError(f"sweep.variants names '{twice}' twice: each variant once")
        self.arms()  # each arm's settings checked now

    def arms(self) -> list[Arm]:
        """The arms, in the order given: a list's variants each as an arm of its own name."""
        if isinstance(self.variants, list):
            return [Arm(v, v) for v in self.variants]
        kind = RUN_KINDS[self.experiment]
        arms = []
        for name, given in self.variants.items():
            given = dict(given or {})
            implicit = "variant" not in given
            variant = given.pop("variant", name)
            if not isinstance(variant, str):
                raise ConfigError(f"sweep.variants.{name}.variant must be a variant's name, got {variant!r}")
            for key in given:
                if key in (kind.variant_key, kind.seed_key):
                    raise ConfigError(f"sweep.variants.{name}.{key}: an arm gives its variant as `variant` and its "
                                      f"seeds come from sweep.seeds")
                if key in self.grid:
                    raise ConfigError(f"sweep.variants.{name}.{key} is also a grid axis (sweep.grid.{key}): set it "
                                      f"in one of them")
            arms.append(Arm(name, variant, tuple(given.items()), implicit))
        return arms


@dataclass(frozen=True)
class Arm:
    """One arm of a sweep: its name (its run folders, report rows and legends), the variant it
    runs, and the dotted keys it sets over the base config."""

    name: str
    variant: str
    settings: tuple[tuple[str, Any], ...] = ()
    implicit: bool = False  # named in a mapping without `variant`: it runs the variant of its name

    def describe(self) -> str:
        """What the arm runs, in words: 'frozen_qk, model.layers={-1: standard}'."""
        return ", ".join([self.variant, *(f"{k}={v}" for k, v in self.settings)])


@dataclass(frozen=True)
class RunSpec:
    variant: str  # the arm's name: its folder, and `variant` in results.jsonl
    point: tuple[tuple[str, Any], ...]  # the grid point, in grid order
    seed: int
    config: Any  # the run's checked config, as its kind reads it (a RunConfig for `train`)
    point_name: str  # the point's folder name, unique in its sweep (`point_names`)

    @property
    def run_id(self) -> str:
        return f"{file_safe(self.variant)}/{self.point_name}/seed{self.seed}"


def _canonical(config: Any) -> str:
    """A run's checked config as one string, equal for equal configs."""
    return json.dumps(to_dict(config) if is_dataclass(config) else config, sort_keys=True, default=repr)


@dataclass
class Sweep:
    base: dict[str, Any]  # plain data of the base run config
    spec: SweepConfig

    def runs(self) -> list[RunSpec]:
        """Every run, variants outermost and seeds innermost, each config fully checked."""
        points = grid_points(self.spec.grid)
        names = point_names(points)
        arms = self.spec.arms()
        folders = Counter(file_safe(a.name) for a in arms)
        clash = [a.name for a in arms if folders[file_safe(a.name)] > 1]
        if clash:
            raise ConfigError(f"sweep.variants {clash} would share the run folder '{file_safe(clash[0])}': name "
                              f"one of them otherwise (an entry point, say)")
        kind = run_kind(self.spec.experiment)
        out = []
        trained: dict[str, RunSpec] = {}  # each run's config, to refuse two arms training one model
        for arm in arms:
            for i, point in enumerate(points):
                for seed in self.spec.seeds:
                    data = copy.deepcopy(self.base)
                    set_dotted(data, kind.variant_key, [arm.variant] if kind.variant_list else arm.variant,
                               "sweep.variants")
                    set_dotted(data, kind.seed_key, [seed] if kind.seed_list else seed, "sweep.seeds")
                    for key, value in arm.settings:
                        set_dotted(data, key, copy.deepcopy(value), f"sweep.variants.{arm.name}.{key}")
                    for key, value in point:
                        set_dotted(data, key, value, f"sweep.grid.{key}")
                    train = data.get("train")
                    init = train.get("init_from") if isinstance(train, dict) else None
                    if isinstance(init, str):  # each run fine-tunes its own arm's and seed's model
                        data["train"]["init_from"] = init.replace("{variant}", arm.name).replace("{seed}", str(seed))
                    try:
                        config = kind.read(data)
                    except ConfigError as e:
                        if arm.implicit and arm.name in str(e):
                            raise ConfigError(f"{e} (sweep.variants.{arm.name} gives no `variant`, so it runs the "
                                              f"variant of its name)") from None
                        raise
                    run = RunSpec(arm.name, point, seed, config, names[i])
                    same = trained.setdefault(_canonical(run.config), run)
                    if same is not run and same.variant != arm.name:
                        raise ConfigError(f"sweep.variants: arms '{same.variant}' and '{arm.name}' train the same "
                                          f"model ({arm.describe()} resolves to {same.variant}'s config"
                                          + (f" at {names[i]}" if point else "") + "): keep one of them")
                    if same is not run:
                        raise ConfigError(f"sweep.grid: points {same.point_name} and {names[i]} train the same model "
                                          f"for '{arm.name}' (a value that resolves to another, e.g. a layer of "
                                          f"the model's own variant): drop one, or give the arms their own "
                                          f"settings (a mapping in sweep.variants)")
                    out.append(run)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**copy.deepcopy(self.base), "sweep": to_dict(self.spec)}


def apply_profiles(data: dict[str, Any], profiles: Sequence[str], path: str | Path) -> None:
    """Apply the named profiles of a sweep file, in order, and drop its `profiles` section.

    A profile is one experiment at another scale or budget, as dotted keys and their values::

        profiles:
          budget:    # the same model and task at 1x, 4x and 16x the steps
            train.lr: 3.0e-3
            sweep.grid: {train.steps: [200, 800, 3200]}

    so that one file holds an experiment and every scale it is run at (command-line
    overrides come after the profiles). A key sets what it names: `train: {lr: 3e-3}`
    replaces the whole section, so its other fields take their defaults, not the file's."""
    available = data.pop("profiles", None) or {}
    if not isinstance(available, dict) or not all(isinstance(v, dict) for v in available.values()):
        raise ConfigError(f"{path}: 'profiles' must map each profile's name to its dotted keys and values")
    for name in profiles:
        if name not in available:
            known = ", ".join(sorted(available)) or "none"
            raise ConfigError(f"{path} has no profile '{name}' (its profiles: {known})")
        for key, value in available[name].items():
            set_dotted(data, str(key), copy.deepcopy(value), f"profile '{name}' of {path}")


def load_sweep(path: str | Path, overrides: Sequence[str] = (), profiles: Sequence[str] = ()) -> Sweep:
    data = read_yaml(path)
    # a sweep folder's sweep.yaml says the format of its records; a sweep file of yours says none
    problem = records_format_problem(data.pop("format", RECORDS_FORMAT), Path(path).parent)
    if problem:
        raise ConfigError(problem)
    apply_profiles(data, profiles, path)
    for assignment in overrides:
        apply_override(data, assignment)
    if data.get("sweep") is None:
        raise ConfigError(f"{path} has no 'sweep' section: add one (e.g. 'sweep: {{variants: [standard, mixit]}}') "
                          f"or set sweep keys on the command line, or train one run with 'modformer train'")
    spec = from_dict(SweepConfig, data.pop("sweep"), "sweep")
    sweep = Sweep(base=data, spec=spec)
    sweep.runs()  # check every run's config now, not hours into the sweep
    return sweep
