"""Papers as plugins: what a paper's experiments add to the library, through one entry point.

The library knows no paper. A paper is a package, installed into the project's environment
(`pip install -e mypaper/`), that declares one entry point of the group `modformer.papers`:

    [project.entry-points."modformer.papers"]
    mypaper = "mypaper:register"

`import modformer` loads every entry point of that group once (`load_papers`). Each names a
function `register(paper: Paper)`, or a module that has one; it receives a `Paper` named
after the entry point and adds through it what the paper's experiments need:

- `paper.command(Command(...))`: a `modformer` command, listed by `modformer --help`;
- `paper.run_kind(RunKind(...))`: a kind of sweep run, accepted by `sweep.experiment`;
- `paper.section(fn, printed=HEADING)`: a section in the report of each of its sweeps;
- `paper.mark(fn)`: the line its budget curves mark (a reference budget, say);
- `paper.construction(name, Construction(...))`: a construction named `<paper>.<name>`;
- `paper.part(registry, name, obj)`: a task, variant, mixer or feed-forward module, by the
  same name a package's own part entry point would give it;
- `paper.migration(config=..., sweep=..., summary=..., layout=...)`: how `modformer migrate`
  rewrites what the paper's experiments once recorded.

What `register` adds takes effect only once it has returned: a paper whose entry point does
not load, or whose `register` raises (or calls `sys.exit`), adds nothing, is named in one line
by `modformer list` (`BROKEN`), and the others load. The three papers this repository tests
are registered exactly so, by its pyproject.toml (docs/plugins.md has the whole contract).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib.metadata import distributions, entry_points
from types import ModuleType
from typing import Any, Callable

from .commands import Command, register as register_command
from .constructions import CONSTRUCTIONS, Construction
from .errors import ModformerError
from .installed_papers import BROKEN, PAPERS
from .migrate import (COMMAND, CONFIG, LAYOUT, SUMMARY, SWEEP, CommandMigration, ConfigMigration, LayoutMigration,
                      SummaryMigration, SweepMigration)
from .registry import Registry
from .sweep.kinds import RunKind, register_kind
from .sweep.sections import MARKS, PRINTED, SECTIONS, Mark, Section
from .version import source_version

GROUP = "modformer.papers"
# Every entry-point group the library reads; another group under "modformer." is a typo
# (`modformer list` says so rather than ignoring it).
GROUPS = (GROUP, "modformer.mixers", "modformer.ffns", "modformer.variants", "modformer.tasks",
          "modformer.constructions")


@dataclass
class Paper:
    """One paper's registrations, applied together once its `register` has returned.

    Args:
        name: the entry point's name: `sweep.paper: NAME` selects its sections, and its
            constructions are named `NAME.<construction>`.
        source: where its code came from (`version.source_version` of its `register`: its
            import path, and a package's version or its module file's path and hash), as each
            run's run.json records it.
    """

    name: str
    source: dict[str, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)  # what it registered, in words (`modformer list`)
    _steps: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def _add(self, what: str, step: Callable[[], None]) -> None:
        self.added.append(what)
        self._steps.append(step)

    def command(self, command: Command) -> Command:
        """Add a `modformer` command (its name must be new)."""
        self._add(f"command {command.name}", lambda: register_command(command))
        return command

    def run_kind(self, kind: RunKind) -> RunKind:
        """Make `sweep.experiment: kind.name` select this kind of run (the name must be new)."""
        self._add(f"run kind {kind.name}", lambda: register_kind(kind))
        return kind

    def section(self, section: Section, printed: str | None = None) -> Section:
        """Add a section to the report of each of this paper's sweeps (`modformer report`,
        and the report `modformer sweep` writes when it ends).

        Args:
            section: section(sweep_dir, variants, groups, chosen) -> Markdown lines ([] for
                none). `sweep_dir`: the sweep's folder (its runs: `sweep.runner.run_config`
                reads a run's config.yaml). `variants`: the variants the report shows, in
                its order. `groups`: (variant, setting) -> that grid point's finished runs,
                each a results.jsonl record (`run_id`, `variant`, `point`, `seed`, `summary`:
                the run's summary.json); the setting is the grid point's label, e.g.
                "train.lr=0.003", or "default" with no grid. `chosen`: variant -> the setting
                chosen for it on validation (`groups[(v, chosen[v])]` are its chosen runs).
            printed: the section's heading, if `modformer sweep` should print the section on
                the terminal too (it prints its own tables' and these).
        """
        def add() -> None:
            SECTIONS.setdefault(self.name, []).append(section)
            if printed:
                PRINTED.append(printed)

        self._add(f"report section {printed or getattr(section, '__name__', 'section')}", add)
        return section

    def mark(self, mark: Mark) -> Mark:
        """Draw a line on budget and width curves of this paper's runs.

        Args:
            mark: mark(config, axis) -> (x, label) or None. `config`: a run's resolved config
                (plain data, as its config.yaml); `axis`: "amount" (what a run trained on, in
                its task's unit) or "width".
        """
        def add() -> None:
            if self.name in MARKS:
                raise ValueError(f"paper '{self.name}' registers two marks")
            MARKS[self.name] = mark

        self._add("curve mark", add)
        return mark

    def construction(self, name: str, construction: Construction, alias: str | None = None) -> str:
        """Register a construction as `<paper>.<name>` (its reports get this paper's sections).

        Args:
            alias: another name that finds it too (a bare name configs used before
                constructions were named by paper, e.g. `reference`).

        Returns:
            The name it is registered under.
        """
        full = f"{self.name}.{name}"

        def add() -> None:
            CONSTRUCTIONS.register(full)(replace(construction, paper=self.name))
            if alias:
                CONSTRUCTIONS.alias(alias, full)

        self._add(f"construction {full}" + (f" (alias {alias})" if alias else ""), add)
        return full

    def migration(self, config: ConfigMigration | None = None, sweep: SweepMigration | None = None,
                  summary: SummaryMigration | None = None, command: CommandMigration | None = None,
                  layout: LayoutMigration | None = None) -> None:
        """Teach `modformer migrate` what this paper's records once were (modformer/migrate.py):
        `config` fn(data, saved), `sweep` fn(data), `summary` fn(summary, config), each changing
        its record in place and returning what it changed in words; `command` fn(words), a
        recorded command's words likewise; `layout` fn(folder, config) -> bool, a folder of a
        former layout rewritten as a sweep folder."""
        def add() -> None:
            for table, fn in ((CONFIG, config), (SWEEP, sweep), (SUMMARY, summary), (COMMAND, command),
                              (LAYOUT, layout)):
                if fn is not None:
                    table.append(fn)

        self._add("migration", add)

    def part(self, registry: Registry, name: str, obj: Any) -> Any:
        """Register a part (`registry.TASKS`, `VARIANTS`, `MIXERS`, `FFNS`) under `name`."""
        self._add(f"{registry.kind} {name}", lambda: registry.register(name)(obj))
        return obj

    def apply(self) -> None:
        """Carry out every registration, in the order `register` asked for them."""
        for step in self._steps:
            step()


def _register_function(loaded: object, value: str) -> Callable[[Paper], None]:
    if isinstance(loaded, ModuleType):
        loaded = getattr(loaded, "register", None)
        if loaded is None:
            raise ModformerError(f"module '{value}' has no function register(paper)")
    if not callable(loaded):
        raise ModformerError(f"'{value}' is not a function register(paper) nor a module holding one")
    return loaded


def load_paper(name: str, value: str, load: Callable[[], object]) -> Paper | None:
    """Load one paper's entry point and apply what its `register` adds; on any failure, record
    it in `BROKEN` (one line) and add nothing."""
    try:
        register = _register_function(load(), value)
        paper = Paper(name, source_version(register))
        register(paper)
        paper.apply()
    except (Exception, SystemExit) as e:  # a broken plugin must not stop the library or the others
        what = "exited" if isinstance(e, SystemExit) else e.__class__.__name__
        BROKEN[name] = f"{value}: {what}: {e}".rstrip(": ")
        return None
    PAPERS[name] = paper
    return paper


def load_papers() -> None:
    """Load every paper installed in the `modformer.papers` group (once; `import modformer`
    calls it)."""
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        if ep.name in PAPERS or ep.name in BROKEN:
            continue
        if not ep.name.isidentifier():
            BROKEN[ep.name] = f"{ep.value}: a paper's name must be an identifier (it prefixes its constructions)"
            continue
        load_paper(ep.name, ep.value, ep.load)


def unknown_groups() -> dict[str, list[str]]:
    """Entry-point groups under `modformer.` that the library does not read -> the entry
    points declared in them (a misspelt group would otherwise be ignored)."""
    found: dict[str, list[str]] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group.startswith("modformer.") and ep.group not in GROUPS:
                found.setdefault(ep.group, []).append(f"{ep.name} = {ep.value} ({dist.metadata['Name']})")
    return found


def describe_papers() -> list[str]:
    """`modformer list`'s lines on papers: each loaded one with what it added, each broken one
    in one line, and entry points declared in a group the library does not read."""
    lines = [f"papers ({GROUP} entry points; sweep.paper):"]
    for name, paper in sorted(PAPERS.items()):
        lines.append(f"  {name:<20}{paper.source.get('version', '')}: {', '.join(paper.added) or 'nothing'}")
    lines += [f"  {name:<20}BROKEN: {why}" for name, why in sorted(BROKEN.items())]
    if not PAPERS and not BROKEN:
        lines.append("  none installed")
    for group, declared in sorted(unknown_groups().items()):
        lines.append(f"unknown entry-point group {group} (not read; the groups are {', '.join(GROUPS)}): "
                     + "; ".join(declared))
    return lines
