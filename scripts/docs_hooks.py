"""mkdocs hooks of the documentation site (mkdocs.yml names this file).

- The command reference (docs/cli.md) is generated from the CLI's own argparse parser at
  every build, so it says what `modformer COMMAND --help` says and cannot go stale.
- The committed results (results/**: the READMEs, reports and their figures) are pages of
  the site, taken from where they are, so the docs link to them and the links are checked.
  Their few GitHub-style links are read the way GitHub reads them (a folder opens its
  README; a repeated heading's anchor ends in -1 on GitHub, _1 here).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
CLI_MARKER = "<!-- generated: the help of every command -->"
RESULT_SUFFIXES = {".md", ".png", ".json", ".txt"}


def on_files(files: Files, config) -> Files:
    for path in sorted(RESULTS.rglob("*")):
        inside = path.relative_to(ROOT)
        if path.is_file() and path.suffix in RESULT_SUFFIXES and "runs" not in inside.parts:
            files.append(File.generated(config, inside.as_posix(), abs_src_path=str(path)))
    return files


QUOTE_MARKER = re.compile(r"<!--/?q( [^>]*)?-->")


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    # The quote markers (`modformer quote` refills what they enclose) are invisible on GitHub;
    # here a line that starts with one would open a raw HTML block and split its paragraph.
    markdown = _lists_after_paragraphs(QUOTE_MARKER.sub("", markdown))
    if page.file.src_uri == "cli.md":
        return markdown.replace(CLI_MARKER, command_reference())
    if page.file.src_uri.startswith("results/"):
        return _github_links(markdown, Path(page.file.src_uri).parent, files)
    return markdown


LIST_ITEM = re.compile(r"^([-*+]|\d+\.) ")


def _lists_after_paragraphs(markdown: str) -> str:
    """A list right after a paragraph line, as GitHub reads it: Python-Markdown needs a blank
    line before the list, and would otherwise run its items into the paragraph."""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        previous = out[-1] if out else ""
        if (not fenced and LIST_ITEM.match(line) and previous.strip() and not previous[0].isspace()
                and not LIST_ITEM.match(previous) and not previous.startswith(("|", "#"))):
            out.append("")
        out.append(line)
    return "\n".join(out)


def github_anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _github_links(markdown: str, folder: Path, files: Files) -> str:
    headings = {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", markdown, flags=re.M)}

    def link(match: re.Match) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        at = lambda path: posixpath.normpath((folder / path).as_posix())  # noqa: E731  (`..` resolved, as mkdocs does)
        if target and "://" not in target and files.get_file_from_path(at(target)) is None:
            readme = f"{target.rstrip('/')}/README.md"
            if files.get_file_from_path(at(readme)) is None:
                return f"{text} (`{at(target)}/`)"  # a folder of records, not on the site
            target = readme
        if not target and anchor[1:] not in headings:  # GitHub numbers a repeated heading's anchor -1,
            anchor = re.sub(r"-(\d+)$", r"_\1", anchor)  # Python-Markdown _1 (not a heading ending in a number)
        return f"[{text}]({target}{anchor})"

    return re.sub(r"\[([^\]]*)\]\(([^)#\s]*)(#[^)\s]*)?\)", link, markdown)


def _subcommands(parser: argparse.ArgumentParser, prefix: str):
    """(command line, parser) for every command and subcommand, in the order of --help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest for choice in action._choices_actions}  # not aliases, nor unlisted old names
            for name, sub in action.choices.items():
                if name not in listed:
                    continue
                yield f"{prefix} {name}", sub
                yield from _subcommands(sub, f"{prefix} {name}")


def command_reference() -> str:
    """Every command's --help, as `modformer COMMAND --help` prints it at 100 columns."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    from modformer.cli import build_parser

    parser = build_parser()
    parts = ["## modformer", "", "```text", parser.format_help().rstrip(), "```", ""]
    for command, sub in _subcommands(parser, "modformer"):
        level = "#" * min(2 + command.count(" ") - 1, 4)
        parts += [f"{level} {command[len('modformer '):]}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def on_post_build(config) -> None:
    """The tutorials' pages are rendered by nbconvert, whose links mkdocs does not check:
    every relative link of theirs must reach a page or file of the built site."""
    site = Path(config["site_dir"])
    broken = []
    for page in sorted((site / "tutorials").glob("*/index.html")):
        for target in re.findall(r'href="([^"#:]+)(?:#[^"]*)?"', page.read_text()):
            if target.startswith(("/", "mailto")) or target.endswith((".css", ".js")):
                continue
            found = (page.parent / target).resolve()
            if not (found.is_file() or (found / "index.html").is_file()):
                broken.append(f"{page.relative_to(site)}: {target}")
    if broken:
        raise PluginError("tutorial links that reach nothing in the site:\n  " + "\n  ".join(broken))
