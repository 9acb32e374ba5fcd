"""The documentation site's build, as CI runs it: strict, with every warning counted.

CI (.ci/run) installs the docs tools after the test suites and then runs these tests; where
mkdocs is not installed (the README's test command) they skip, saying so. Each builds a
small site of its own with the repository's hooks, so a broken anchor is planted, not
hoped for, and the check of CI's own command line is read from .ci/run itself."""

import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
mkdocs = pytest.importorskip("mkdocs", reason="the docs tools are not installed (MODFORMER_DOCS=1 bash "
                                              "scripts/setup.sh installs them; CI does, then runs these)")


def ci_build_command() -> list[str]:
    """The `mkdocs build` line of .ci/run, as its arguments (environment assignments dropped)."""
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if "mkdocs build" in line and not line.lstrip().startswith("#"):
            words = shlex.split(line)
            return words[next(i for i, w in enumerate(words) if w.endswith("mkdocs")):]
    raise AssertionError(".ci/run builds no documentation site")


def small_site(tmp_path: Path, page: str) -> Path:
    """A site of one page beside a second one, with this repository's hooks."""
    docs = tmp_path / "docs"
    docs.mkdir(parents=True)
    (docs / "index.md").write_text(page)
    (docs / "other.md").write_text("# Other\n\n## A section\n\nText.\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: test\ndocs_dir: docs\nstrict: true\nnav: [index.md, other.md]\n"
                      f"hooks: [{ROOT / 'scripts' / 'docs_hooks.py'}]\nnot_in_nav: /results/**\n"
                      "validation: {omitted_files: warn, absolute_links: warn, unrecognized_links: warn, "
                      "anchors: warn}\n")
    return config


def build(config: Path) -> subprocess.CompletedProcess:
    args = ci_build_command()[1:]  # without the executable: the same tool, from this Python
    return subprocess.run([sys.executable, "-m", "mkdocs", *args, "-f", str(config), "-d",
                           str(config.parent / "site")], capture_output=True, text=True, timeout=120,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_ci_builds_strictly_and_hears_every_warning():
    """--quiet raises the log level above warnings, so strict mode would count none of them."""
    command = ci_build_command()
    assert "--strict" in command
    assert not {"--quiet", "-q"} & set(command), command


def test_a_planted_broken_anchor_fails_cis_build(tmp_path):
    good = build(small_site(tmp_path / "good", "# Home\n\nSee [a section](other.md#a-section).\n"))
    assert good.returncode == 0, good.stderr
    broken = build(small_site(tmp_path / "broken", "# Home\n\nSee [a section](other.md#no-such-section).\n"))
    assert broken.returncode != 0
    assert "no-such-section" in broken.stderr and "Aborted" in broken.stdout + broken.stderr


def github_links():
    """The docs hooks' link rewriting (scripts/docs_hooks.py is no package)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from docs_hooks import _github_links
    finally:
        sys.path.pop(0)
    return _github_links


def test_a_heading_that_ends_in_a_number_keeps_its_anchor():
    """GitHub numbers a repeated heading's anchor -1 and Python-Markdown _1, and the hooks
    rewrite one into the other for the results pages; a heading that itself ends in a
    number ('... Figure 2') is not a repeat, and its link is left as it is."""
    _github_links = github_links()

    class NoFiles:
        def get_file_from_path(self, path):
            return None

    page = "## Retrieval (Table 1, Figure 2)\n\n## Notes\n\n## Notes\n\n[a](#retrieval-table-1-figure-2) [b](#notes-1)\n"
    out = _github_links(page, Path("results"), NoFiles())
    assert "[a](#retrieval-table-1-figure-2)" in out and "[b](#notes_1)" in out


def test_a_link_up_a_folder_reaches_its_page():
    """`../bench/LOG.md` from a results page is the site's results/bench/LOG.md, a link; a
    folder of records that is no page becomes its path in words."""
    _github_links = github_links()

    class Files:
        def get_file_from_path(self, path):
            return object() if path == "results/bench/LOG.md" else None

    out = _github_links("[speed](../bench/LOG.md#x) [runs](../bench/runs)", Path("results/random_attention"), Files())
    assert "[speed](../bench/LOG.md#x)" in out and "(`results/bench/runs/`)" in out


def test_mkdocs_serve_starts(tmp_path):
    """The README's `mkdocs serve` serves the site (tutorials not executed, to be quick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--no-livereload", "-a", f"127.0.0.1:{port}"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={"NO_MKDOCS_2_WARNING": "1", "MODFORMER_DOCS_EXECUTE": "false",
                                   "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    try:
        deadline, page = time.monotonic() + 240, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
                break
            except OSError:
                time.sleep(2)
        assert page is not None, f"mkdocs serve did not serve (exit {server.poll()})"
        assert re.search(r"<title>[^<]*modformer", page)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_quote_markers_do_not_split_a_paragraph():
    """A line that starts with `<!--q ...-->` would open a raw HTML block in Python-Markdown
    and cut its paragraph in two; the hooks drop the (invisible) markers first."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from docs_hooks import QUOTE_MARKER
    finally:
        sys.path.pop(0)
    text = "MixiT scores\n<!--q main_reference mixit train.lr=0.003 test.accuracy %2 mean-->0.77%<!--/q-->, alone."
    assert QUOTE_MARKER.sub("", text) == "MixiT scores\n0.77%, alone."
