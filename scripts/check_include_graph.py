#!/usr/bin/env python3
"""Checks that the include graph between the repository's top-level source folders is acyclic.

Every `#include "folder/..."` (and `#include <omnilearn/...>`, the public header in include/) in a
source file under a top-level folder is an edge from that file's folder to the included file's
folder. A cycle means two folders that cannot be built, tested or understood apart: the check
prints the cycle's edges, each with one file that makes it, and exits 1.

Usage: check_include_graph.py [REPO_ROOT]   (default: the repository holding this script)
       check_include_graph.py --self-test   (shows the check fails on a made-up cycle)
"""
import os
import re
import sys
import tempfile

# Not part of the layered code: tests and benchmarks may include any folder.
NOT_LAYERS = {"tests", "bench", "examples", "docs", "scripts", "cmake", "build"}
SOURCE_SUFFIXES = (".hpp", ".cpp", ".h", ".cc", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def layers(root):
    """Top-level folders holding sources, other than the excluded ones."""
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if (not os.path.isdir(path) or name.startswith(".") or name in NOT_LAYERS
                or name.startswith("build")):
            continue
        for _, _, files in os.walk(path):
            if any(f.endswith(SOURCE_SUFFIXES) for f in files):
                found.append(name)
                break
    return found


def folder_of_include(target, bracket, folders):
    """The top-level folder an include line names, or None (system and third-party headers)."""
    first = target.split("/", 1)[0]
    if bracket == "<":
        # The public header is installed as <omnilearn/omnilearn.hpp> from include/.
        if first == "omnilearn" and "include" in folders:
            return "include"
        return None
    return first if first in folders and "/" in target else None


def edges(root):
    """{(from_folder, to_folder): example_file}."""
    folders = set(layers(root))
    found = {}
    for folder in sorted(folders):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for bracket, target in INCLUDE.findall(text):
                    to = folder_of_include(target, bracket, folders)
                    if to and to != folder:
                        found.setdefault((folder, to), os.path.relpath(path, root))
    return found


def find_cycle(graph_edges):
    """A list of folders forming a cycle (first == last), or None."""
    graph = {}
    for a, b in graph_edges:
        graph.setdefault(a, []).append(b)
    state = {}  # folder -> 1 on the stack, 2 done
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, [])):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def check(root):
    graph_edges = edges(root)
    cycle = find_cycle(graph_edges)
    if cycle:
        print("include cycle between top-level folders: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            print(f"  {a}/ includes {b}/ (e.g. {graph_edges[(a, b)]})")
        print("move the shared part down to a folder both may include, so the includes point one "
              "way (docs/ARCHITECTURE.md, 'Folders and what they may call')")
        return 1
    print(f"include graph acyclic: {len(graph_edges)} edges between "
          f"{len(layers(root))} folders")
    for (a, b) in sorted(graph_edges):
        print(f"  {a} -> {b}")
    return 0


def self_test():
    """The check must fail on a cycle and pass once it is broken."""
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        write("low/a.hpp", "#pragma once\n")
        write("mid/b.cpp", '#include "low/a.hpp"\n#include <vector>\n')
        write("top/c.cpp", '#include "mid/b.hpp"\n#include <omnilearn/omnilearn.hpp>\n')
        write("include/omnilearn/omnilearn.hpp", "#pragma once\n")
        write("tests/t.cpp", '#include "top/c.hpp"\n')  # tests may include anything
        if check(root) != 0:
            print("self-test: an acyclic tree was reported as a cycle")
            return 1
        # Spaced the way clang-format leaves some includes; low -> mid closes mid -> low.
        write("low/e.cpp", '  #  include "mid/x.hpp"\n')
        if check(root) != 1:
            print("self-test: a cycle low -> mid -> low went unnoticed")
            return 1
    print("self-test passed: the check fails on a cycle")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    sys.exit(check(root))
