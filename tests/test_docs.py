"""The docs (README.md and docs/*.md), checked by reading them; nothing is run.

* Every relative link resolves: its file exists, and a ``#anchor`` is the GitHub slug of
  a heading of the file it points to.
* Every ``python -m hpsearch ...`` command in code (fenced blocks and inline code; also
  ``.venv/bin/python -m hpsearch``, ``python3 -m hpsearch`` and the ``hpsearch`` script)
  parses with the CLI's own argparse parser (parsed, never run). A ``usage:`` line names
  only options its command has, and every command has one.
* Every repository path named in code (``search_spaces/...``, ``hpsearch/...``) exists.
* Each docs file starts with a ``# Title`` and a summary paragraph; the README links to
  every docs file and stays within its line budget; its test command is CI's, byte for
  byte.

Each check is a function of the files, so every test also shows its check failing on a
copy with one defect.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: The README is the page a newcomer reads first: what it is, the two commands, a quick
#: start, the headline figure and the links fit on about two screens.
README_MAX_LINES = 150

#: A summary paragraph says what the file holds: more than a title, less than a page.
SUMMARY_MIN_WORDS = 20

#: Top-level folders whose paths, named in code, must exist (benchmarks/results is where
#: the benchmarks write their output, so it need not).
CHECKED_ROOTS = ("search_spaces", "clusters", "benchmarks", "hpsearch", "tests", "docs",
                 ".ci")
OUTPUT_PATHS = ("benchmarks/results",)


# -- reading Markdown ----------------------------------------------------------------


def markdown_files(root: Path) -> list[Path]:
    """README.md and every docs/*.md under ``root``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def split_code(text: str) -> tuple[str, list[str]]:
    """Split Markdown into its prose (fenced blocks blanked, line numbers kept) and the
    lines of its fenced code blocks (a line ending in ``\\`` joined with the next)."""
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    pending = ""
    for line in text.split("\n"):
        marker = re.match(r"\s*(```|~~~)", line)
        if fence is None and marker:
            fence = marker.group(1)
            prose.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            else:
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                else:
                    code.append(pending + line)
                    pending = ""
            prose.append("")
            continue
        prose.append(line)
    return "\n".join(prose), code


def inline_code(prose: str) -> list[str]:
    """The inline code spans of ``prose``, whitespace collapsed (a span may wrap a line);
    inside a table row an escaped ``\\|`` is the ``|`` it renders as."""
    spans = []
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        spans.append(" ".join(match.group(1).replace("\\|", "|").split()))
    return spans


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case,
    punctuation other than ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in ``text`` (a repeated heading gets ``-1``, ``-2``)."""
    prose, _code = split_code(text)
    seen: dict[str, int] = {}
    found = set()
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of the Markdown links in ``text``'s prose (not in code)."""
    prose, _code = split_code(text)
    prose = re.sub(r"(?<!`)`[^`]+`(?!`)", "", prose)
    return re.findall(r"\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)", prose)


# -- the checks -----------------------------------------------------------------------


def link_problems(root: Path) -> list[str]:
    """Every relative link of README.md and docs/*.md that does not resolve."""
    problems = []
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")
        for target in links(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            where = (path.parent / file_part).resolve() if file_part else path
            name = f"{path.relative_to(root)}: ({target})"
            if not where.exists():
                problems.append(f"{name}: no such file")
            elif anchor and where.suffix == ".md" and anchor not in anchors(
                    where.read_text(encoding="utf-8")):
                problems.append(f"{name}: no heading of {where.name} has that anchor")
    return problems


#: A command: ``python -m hpsearch`` (any python, any path to it) anywhere in a line or
#: span, or the ``hpsearch`` script at its start (after a ``$`` prompt).
_COMMAND = re.compile(
    r"(?:(?:^|(?<=[\s'\"(]))(?:[\w./~-]*/)?python3?(?:\.\d+)? -m hpsearch"
    r"|^(?:\$ )?hpsearch)(?=\s|$)(.*)")


def _cut(rest: str) -> str:
    """The command's own words: up to a shell operator, a comment or a quote it did not
    open (the end of ``'cd dir && python -m hpsearch ...'``)."""
    quote = None
    for i, char in enumerate(rest):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            if rest.count(char, i) % 2:  # no partner after it: the caller's quote
                return rest[:i]
            quote = char
        elif char in ";|" or rest.startswith("&&", i) or (
                char == "#" and (i == 0 or rest[i - 1].isspace())):
            return rest[:i]
    return rest


def commands(text: str) -> list[str]:
    """The hpsearch commands in ``text``'s code, as the words after ``hpsearch``
    (``usage:`` lines, synopses rather than commands, are left to :func:`usages`)."""
    prose, code = split_code(text)
    found = []
    for chunk in [*code, *inline_code(prose)]:
        chunk = chunk.strip()
        if chunk.startswith("usage:"):
            continue
        match = _COMMAND.search(chunk)
        if match:
            found.append(" ".join(_cut(match.group(1)).split()))
    return found


def usages(text: str) -> list[str]:
    """The ``usage: python -m hpsearch ...`` lines of ``text``'s code blocks (synopses:
    ``[--opt X]``, ``a|b``, ``...``), as the words after ``hpsearch``."""
    _prose, code = split_code(text)
    return [line.split("python -m hpsearch", 1)[1].strip() for line in code
            if line.startswith("usage: python -m hpsearch")]


def _parser():
    from hpsearch import cli

    return cli._parser()  # the parser `python -m hpsearch` parses with


def parse_problem(words: str) -> str | None:
    """Why the CLI's parser refuses ``words`` (the text after ``hpsearch``), or None;
    ``--help`` and ``--version`` count as parsed (they exit 0 without running)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        argv = shlex.split(words)
    except ValueError as exc:
        return f"not shell words: {exc}"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            _parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip().splitlines()[-1]
    return None


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def usage_problems(text: str) -> list[str]:
    """Options a ``usage:`` line names that its command does not have, and commands with
    no ``usage:`` line (when ``text`` has any)."""
    import argparse

    parser = _parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    lines = usages(text)
    problems = []
    described = set()
    for line in lines:
        first = line.split()[0]
        command = sub.choices.get(first)
        if command is None and not first.startswith("-"):
            problems.append(f"usage: {line}: no command {first!r}")
            continue
        described.add(first)
        known = _options(command if command is not None else parser)
        for option in re.findall(r"(?<![\w-])--?[a-z][\w-]*", line):
            if option not in known:
                problems.append(f"usage: {line}: {first} has no option {option}")
    if lines:
        problems += [f"no usage: line for {name}" for name in sub.choices
                     if name not in described]
    return problems


def command_problems(root: Path) -> list[str]:
    """Every hpsearch command and ``usage:`` line in README.md and docs/*.md that the
    CLI's parser does not accept."""
    problems = []
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")
        for words in commands(text):
            why = parse_problem(words)
            if why:
                problems.append(f"{path.relative_to(root)}: hpsearch {words}: {why}")
        problems += [f"{path.relative_to(root)}: {p}" for p in usage_problems(text)]
    return problems


_PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./*-]*)"
                   % "|".join(map(re.escape, CHECKED_ROOTS)))


def path_problems(root: Path) -> list[str]:
    """Repository paths named in code in README.md and docs/*.md that do not exist (a
    ``*`` is a glob that must match something)."""
    problems = []
    for path in markdown_files(root):
        prose, code = split_code(path.read_text(encoding="utf-8"))
        for chunk in [*code, *inline_code(prose)]:
            for named in _PATH.findall(chunk):
                named = named.rstrip(".")
                if named.startswith(OUTPUT_PATHS):
                    continue
                found = any(root.glob(named)) if "*" in named else (root / named).exists()
                if not found:
                    problems.append(f"{path.relative_to(root)}: {named} does not exist")
    return problems


def summary_problems(root: Path) -> list[str]:
    """Docs files that do not start with ``# Title`` and a summary paragraph."""
    problems = []
    for path in sorted((root / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        blocks = [b.strip() for b in text.split("\n\n") if b.strip()]
        name = path.relative_to(root)
        if not blocks or not re.fullmatch(r"# \S.*", blocks[0]):
            problems.append(f"{name}: does not start with a '# Title' line")
            continue
        summary = blocks[1] if len(blocks) > 1 else ""
        if (not summary or re.match(r"(#|```|~~~|\||[-*] |\d+\. |    )", summary)
                or len(summary.split()) < SUMMARY_MIN_WORDS):
            problems.append(f"{name}: the title is not followed by a summary paragraph "
                            f"(at least {SUMMARY_MIN_WORDS} words of prose)")
    return problems


def readme_problems(root: Path) -> list[str]:
    """A README over its line budget, without a link to each docs file, or whose test
    command is not the one .ci/run runs."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    problems = []
    n_lines = len(readme.splitlines())
    if n_lines > README_MAX_LINES:
        problems.append(f"README.md has {n_lines} lines, over its budget of "
                        f"{README_MAX_LINES}")
    linked = {(root / target.partition("#")[0]).resolve() for target in links(readme)}
    problems += [f"README.md does not link to {doc.relative_to(root)}"
                 for doc in sorted((root / "docs").glob("*.md"))
                 if doc.resolve() not in linked]
    ci = [line for line in (root / ".ci/run").read_text().splitlines()
          if line.startswith("python3 -m venv")]
    _prose, code = split_code(readme)
    if len(ci) != 1:
        problems.append(f".ci/run has {len(ci)} set-up-and-test command lines, not one")
    elif ci[0] not in code:
        problems.append(f"README.md's code does not hold .ci/run's command: {ci[0]}")
    return problems


# -- the tests ------------------------------------------------------------------------


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the files the checks read: README.md, docs/, .ci/run and the folders
    whose paths the docs name (their files are not read, only listed)."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    for name in CHECKED_ROOTS:
        if name != "docs" and (REPO / name).is_dir():
            shutil.copytree(REPO / name, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__", "results"))
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_slugs_are_githubs():
    assert slug("`space.yaml` reference") == "spaceyaml-reference"
    assert slug("Joining a cluster: Ray 2.60's token authentication") == \
        "joining-a-cluster-ray-260s-token-authentication"
    assert slug("GPUs: doctor, plan, use per trial, OOM, multi-GPU") == \
        "gpus-doctor-plan-use-per-trial-oom-multi-gpu"
    text = "# A\n\n## B\n\n```\n# not a heading\n```\n\n## B\n"
    assert anchors(text) == {"a", "b", "b-1"}


def test_every_link_resolves():
    assert link_problems(REPO) == []


def test_a_broken_link_or_anchor_is_found(copy: Path):
    assert link_problems(copy) == []
    _edit(copy / "docs/reference.md", "(curve_sampler.md", "(curve_sampler_gone.md")
    _edit(copy / "README.md", "(docs/benchmarks.md",
          "(docs/benchmarks.md#no-such-heading")
    problems = link_problems(copy)
    assert len(problems) == 2, problems
    assert "docs/reference.md: (curve_sampler_gone.md): no such file" in problems
    assert any(p.startswith("README.md: (docs/benchmarks.md#no-such-heading): no heading")
               for p in problems)


def test_every_hpsearch_command_in_the_docs_parses():
    found = [words for path in markdown_files(REPO)
             for words in commands(path.read_text(encoding="utf-8"))]
    assert len(found) > 40  # the extraction finds them (the README alone has a dozen)
    assert "run search_spaces/digits_mlp.yaml" in found
    assert command_problems(REPO) == []


def test_the_extraction_finds_commands_inside_other_commands():
    text = ("```bash\n$ python -m hpsearch report runs/x --format md\n"
            "ray exec c.yaml 'cd ~/hpsearch && python3 -m hpsearch run s.yaml'  # note\n"
            "kubectl exec \"$HEAD\" -- python -m hpsearch doctor /home/ray/space.yaml\n"
            ".venv/bin/python -m hpsearch validate \\\n    s.yaml --no-import\n```\n"
            "Run `hpsearch resume runs/x` or (`python -m hpsearch plan s.yaml --point\n"
            "high`); `--point mid\\|high` is not a command.\n")
    assert commands(text) == ["report runs/x --format md", "run s.yaml",
                              "doctor /home/ray/space.yaml",
                              "validate s.yaml --no-import",
                              "resume runs/x", "plan s.yaml --point high"]


def test_a_command_the_cli_refuses_is_found(copy: Path):
    assert command_problems(copy) == []
    _edit(copy / "README.md", "python -m hpsearch run search_spaces/digits_mlp.yaml\n",
          "python -m hpsearch run search_spaces/digits_mlp.yaml --no-such-flag\n")
    _edit(copy / "docs/gpus.md", "python -m hpsearch plan search_spaces/digits_gpu.yaml",
          "python -m hpsearch plan search_spaces/digits_gpu.yaml --precision fp8")
    _edit(copy / "docs/reference.md", "usage: python -m hpsearch repair RUN_DIR",
          "usage: python -m hpsearch repair RUN_DIR [--force]")
    problems = command_problems(copy)
    assert len(problems) == 3, problems
    assert any("--no-such-flag" in p and "unrecognized arguments" in p for p in problems)
    assert any("fp8" in p and "invalid choice" in p for p in problems)
    assert any("repair has no option --force" in p for p in problems)


def test_every_command_has_a_usage_line_naming_only_its_options():
    text = "```\nusage: python -m hpsearch run SPACE.yaml [--quiet] [--loud]\n```\n"
    problems = usage_problems(text)
    assert "usage: run SPACE.yaml [--quiet] [--loud]: run has no option --loud" \
        in problems
    assert "no usage: line for doctor" in problems
    assert usage_problems((REPO / "docs/reference.md").read_text(encoding="utf-8")) == []


def test_every_path_named_in_code_exists():
    assert path_problems(REPO) == []


def test_a_missing_path_is_found(copy: Path):
    _edit(copy / "README.md", "search_spaces/digits_mlp.yaml",
          "search_spaces/digits_gone.yaml")
    assert path_problems(copy) == [
        "README.md: search_spaces/digits_gone.yaml does not exist"]


def test_every_docs_file_starts_with_a_title_and_a_summary():
    assert summary_problems(REPO) == []
    assert len(list((REPO / "docs").glob("*.md"))) >= 9


def test_a_docs_file_without_a_summary_is_found(copy: Path):
    (copy / "docs/untitled.md").write_text("Some text without a title.\n")
    (copy / "docs/bare.md").write_text("# Bare\n\n## At once a section\n\nText.\n")
    assert summary_problems(copy) == [
        "docs/bare.md: the title is not followed by a summary paragraph "
        f"(at least {SUMMARY_MIN_WORDS} words of prose)",
        "docs/untitled.md: does not start with a '# Title' line"]


def test_the_readme_is_short_links_every_doc_and_names_cis_command():
    assert readme_problems(REPO) == []


def test_a_long_readme_a_missing_link_or_another_test_command_is_found(copy: Path):
    readme = copy / "README.md"
    _edit(readme, "(docs/gpus.md)", "(https://example.org/gpus)")
    _edit(readme, "--dist loadgroup", "--dist load")
    readme.write_text(readme.read_text() + "line\n" * README_MAX_LINES)
    problems = readme_problems(copy)
    assert len(problems) == 3, problems
    assert problems[0].startswith("README.md has ") and "over its budget" in problems[0]
    assert problems[1] == "README.md does not link to docs/gpus.md"
    assert problems[2].startswith("README.md's code does not hold .ci/run's command")


def section_problem(root: Path, pointer: str) -> str | None:
    """Why ``"docs/FILE.md, 'Heading'"`` (a message's pointer to the docs) names no
    heading of that file, or None."""
    file_part, _, heading = pointer.partition(", ")
    path = root / file_part
    if not path.is_file():
        return f"{pointer}: no file {file_part}"
    if slug(heading.strip("'")) not in anchors(path.read_text(encoding="utf-8")):
        return f"{pointer}: {file_part} has no such heading"
    return None


def test_the_sections_messages_point_to_exist():
    from hpsearch.adapters.trial import lightning_api

    assert section_problem(REPO, lightning_api.DOCS_SECTION) is None
    assert section_problem(REPO, "docs/reference.md, 'Writing a trainabel'") == \
        "docs/reference.md, 'Writing a trainabel': docs/reference.md has no such heading"
    assert section_problem(REPO, "README.txt, 'Writing a trainable'") == \
        "README.txt, 'Writing a trainable': no file README.txt"
