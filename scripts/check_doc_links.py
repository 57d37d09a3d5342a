#!/usr/bin/env python3
"""Checks the repository's Markdown: README.md, CONTRIBUTING.md and every .md under docs/.

A reader has only the repository, so each of these files must hold:
- every relative link and image ([text](path), ![alt](path), [name]: path) names a file or
  folder inside the repository, and its #anchor (or a bare #anchor) names a heading of the
  target Markdown file, spelt as GitHub makes heading anchors;
- no absolute path of a machine (/tmp/..., /work/..., /home/..., /root/...);
- every repository path it cites in prose or code (`bench/jobs/soak.py`, tests/data/trace_*.csv,
  `jobs/job_spec`) exists, so nothing points at a file that is not in the repository.

Usage: scripts/check_doc_links.py [--root DIR] [FILE.md ...]
Prints one line per problem (FILE:LINE: what) and exits 1 if there is any, 0 otherwise; 2 for
bad usage. Run by ctest as `docs_link_check`.
"""

import argparse
import glob
import os
import re
import sys
import unicodedata

# Top-level folders of the repository: a path starting with one of these is a citation of a
# repository file and must exist.
REPO_DIRS = ("asp", "bench", "cli", "cluster", "cmake", "controller", "core", "dashboard", "deploy",
             "docs", "elastic", "examples", "head", "include", "jobs", "runtime", "scripts", "state",
             "tests", "trainer", "training", "wire")
# The head's state store keys that begin like a folder (docs/ARCHITECTURE.md lists them): names
# of keys, not citations of files.
STORE_KEYS = ("head/epoch", "head/alive_at")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(tmp|work|home|root)/")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# A repository path in prose or code: a top-level folder, then path characters.
REPO_PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./*{},<>-]*)" % "|".join(REPO_DIRS))


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # images -> alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links -> their text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def strip_inline_code(line):
    return re.sub(r"`[^`]*`", "", line)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def anchors_of(path, cache):
    if path not in cache:
        seen = {}
        anchors = set()
        in_fence = False
        for line in read_lines(path):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            m = HEADING.match(line)
            if not m:
                continue
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
        cache[path] = anchors
    return cache[path]


def path_exists(root, cited):
    """A cited repository path exists: as written, as a glob, or as a stem with a source suffix."""
    cited = cited.rstrip(".,;:")
    if "<" in cited or ">" in cited:
        cited = cited.split("<", 1)[0]  # runs/<job-id>/...: check the fixed part
    if not cited or cited.endswith("/") and os.path.isdir(os.path.join(root, cited)):
        return True
    if "{" in cited:
        head, _, rest = cited.partition("{")
        options, _, tail = rest.partition("}")
        return all(path_exists(root, head + o + tail) for o in options.split(","))
    full = os.path.join(root, cited)
    if "*" in cited:
        return bool(glob.glob(full))
    if os.path.exists(full):
        return True
    return any(os.path.exists(full + ext) for ext in (".hpp", ".cpp", ".py", ".cmake", ".md"))


def check_file(root, path, cache):
    problems = []
    rel = os.path.relpath(path, root)
    base = os.path.dirname(path)
    in_fence = False
    previous = ""
    for number, line in enumerate(read_lines(path), start=1):
        where = "%s:%d" % (rel, number)
        # A reference definition cannot interrupt a paragraph: "[1..2]: text" inside one is prose.
        after_blank = not previous.strip()
        previous = line
        m = MACHINE_PATH.search(line)
        if m:
            problems.append("%s: absolute machine path '%s...': cite a path inside the repository"
                            % (where, line[m.start():m.start() + 24].split()[0]))
        # Links are checked below, against this file's folder; the rest of the line is prose.
        for cited in sorted(set(REPO_PATH.findall(INLINE_LINK.sub("", line)))):
            cited = cited.rstrip(".,;:")
            if cited not in STORE_KEYS and not path_exists(root, cited):
                problems.append("%s: cites '%s', which is not in the repository" % (where, cited))
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = strip_inline_code(line)
        targets = [t for t in INLINE_LINK.findall(prose)]
        ref = REFERENCE_DEF.match(prose) if after_blank else None
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            problems.extend(check_target(root, path, base, where, target, cache))
    return problems


def check_target(root, path, base, where, target, cache):
    if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return []  # http:, https:, mailto: ...: not checked here
    if target.startswith("/"):
        return ["%s: link '%s' is absolute: make it relative to this file" % (where, target)]
    file_part, _, anchor = target.partition("#")
    if file_part:
        resolved = os.path.normpath(os.path.join(base, file_part))
        if os.path.relpath(resolved, root).startswith(".."):
            return ["%s: link '%s' leaves the repository" % (where, target)]
        if not os.path.exists(resolved):
            return ["%s: link '%s': no such file %s" % (where, target,
                                                       os.path.relpath(resolved, root))]
    else:
        resolved = path
    if anchor:
        if not resolved.endswith(".md") or os.path.isdir(resolved):
            return ["%s: link '%s': an anchor into a file that is not Markdown" % (where, target)]
        if anchor.lower() not in anchors_of(resolved, cache):
            return ["%s: link '%s': %s has no heading with anchor #%s" %
                    (where, target, os.path.relpath(resolved, root), anchor)]
    return []


def default_files(root):
    files = [os.path.join(root, f) for f in ("README.md", "CONTRIBUTING.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    return [f for f in files if os.path.exists(f)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), help="the repository's root (default: this script's parent folder)")
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, "
                        "CONTRIBUTING.md, docs/**/*.md)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = [os.path.abspath(f) for f in args.files] or default_files(root)
    if not files:
        print("check_doc_links: no Markdown files under %s" % root, file=sys.stderr)
        return 2
    cache = {}
    problems = []
    for path in files:
        if not os.path.isfile(path):
            print("check_doc_links: no such file: %s" % path, file=sys.stderr)
            return 2
        problems.extend(check_file(root, path, cache))
    for p in problems:
        print(p)
    print("check_doc_links: %d file(s), %d problem(s)" % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
