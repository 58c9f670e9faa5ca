"""bash_exec_env: shell tasks over a prepared directory tree (create, find, count, transform, archive).

One tool, `run`, executes a bash command in the sandbox; the reward checks the final workspace state
and the last command's output. Every built-in template is solved by ONE short `run` call that copies
the names from the instruction (docs/learnability.md: a 0.5M-parameter model can learn that), then `submit`.
"""
from __future__ import annotations

import random

from envs.base import Suite
from envs.command_env import CommandEnv, Draft, Template, command_task, run_tools
from envs.pools import Pools, PoolsBySplit, vocabulary
from envs.tasks import Task

ENV = "bash_exec_env"
EXTENSIONS = ("txt", "md", "csv", "log", "py", "json", "yaml", "ini", "cfg", "dat", "sh", "xml")
TRAIN_TASKS, TEST_TASKS = 3000, 100


def _file(p: Pools, rng: random.Random, avoid: set[str] = frozenset(), ext: str | None = None) -> str:
    while True:
        name = f"{p.stem(rng)}.{ext or rng.choice(EXTENSIONS)}"
        if name not in avoid:
            return name


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _distractors(p: Pools, rng: random.Random, files: dict[str, str], n: int = 2) -> dict[str, str]:
    out = dict(files)
    for _ in range(n):
        out[_file(p, rng, set(out))] = _text(p.lines(rng, rng.randint(1, 4)))
    return out


def _keep(files: dict[str, str], *skip: str) -> list[dict]:
    """Checks that the files the task does not touch are still there, unchanged."""
    return [{"type": "file", "path": k, "content": v} for k, v in files.items() if k not in skip]


# ------------------------------------------------------------------ templates

def t_create(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    base = _distractors(p, rng, {})
    f = _file(p, rng, set(base))
    return Draft(rng.choice(CREATE), f"echo {w} > {f}",
                 [{"type": "file", "path": f, "content": w + "\n", "strip": True}] + _keep(base), {"w": w, "f": f},
                 files=base)


def t_count(p: Pools, rng: random.Random) -> Draft:
    n = p.number(rng, 2, 40)
    f = _file(p, rng)
    base = _distractors(p, rng, {f: _text(p.lines(rng, n))})
    return Draft(rng.choice(COUNT), f"wc -l < {f}",
                 [{"type": "output", "text": str(n), "match": "first_token"}] + _keep(base), {"f": f, "answer": str(n)},
                 files=base)


def t_move(p: Pools, rng: random.Random) -> Draft:
    f = _file(p, rng)
    d = p.stem(rng)
    base = _distractors(p, rng, {f: _text(p.lines(rng, rng.randint(1, 4)))})
    return Draft(rng.choice(MOVE), f"mkdir -p {d} && mv {f} {d}/",
                 [{"type": "file", "path": f"{d}/{f}", "content": base[f]}, {"type": "absent", "path": f}]
                 + _keep(base, f), {"f": f, "d": d}, files=base)


def t_tail(p: Pools, rng: random.Random) -> Draft:
    n = p.number(rng, 2, 12)
    f = _file(p, rng)
    lines = p.lines(rng, n + rng.randint(2, 8))
    base = _distractors(p, rng, {f: _text(lines)})
    return Draft(rng.choice(TAIL), f"tail -n {n} {f}",
                 [{"type": "output", "text": "\n".join(lines[-n:])}] + _keep(base), {"f": f, "n": str(n)}, files=base)


def t_find(p: Pools, rng: random.Random) -> Draft:
    d = p.stem(rng)
    sub = p.stem(rng)
    ext, other = rng.sample(EXTENSIONS, 2)
    hits = [f"{d}/{_file(p, rng, ext=ext)}", f"{d}/{sub}/{_file(p, rng, ext=ext)}"][: rng.randint(1, 2)]
    if sub == d:  # keep the nested hit distinct from the top one
        hits = hits[:1]
    files = {h: _text(p.lines(rng, 1)) for h in hits}
    files[f"{d}/{_file(p, rng, ext=other)}"] = _text(p.lines(rng, 1))
    files[_file(p, rng, ext=ext)] = _text(p.lines(rng, 1))  # same extension outside the directory
    return Draft(rng.choice(FIND), f"find {d} -name '*.{ext}'",
                 [{"type": "output", "text": "\n".join(hits), "match": "lines"}] + _keep(files),
                 {"d": d, "ext": ext}, files=files)


def t_tar(p: Pools, rng: random.Random) -> Draft:
    d = p.stem(rng)
    a = p.stem(rng)
    members = [f"{d}/{_file(p, rng)}" for _ in range(rng.randint(1, 3))]
    files = _distractors(p, rng, {m: _text(p.lines(rng, 2)) for m in members}, 1)
    return Draft(rng.choice(TAR), f"tar czf {a}.tar.gz {d}",
                 [{"type": "tar", "path": f"{a}.tar.gz", "members": members}] + _keep(files), {"d": d, "a": a},
                 files=files)


def t_sed(p: Pools, rng: random.Random) -> Draft:
    w1, w2 = p.distinct(p.word, rng, 2)
    f = _file(p, rng)
    lines = p.lines(rng, rng.randint(2, 5))
    for i in rng.sample(range(len(lines)), rng.randint(1, len(lines))):
        lines[i] = f"{lines[i]} {w1}"
    before = _text(lines)
    base = _distractors(p, rng, {f: before})
    return Draft(rng.choice(SED), f"sed -i 's/{w1}/{w2}/g' {f}",
                 [{"type": "file", "path": f, "content": before.replace(w1, w2)}] + _keep(base, f),
                 {"f": f, "w1": w1, "w2": w2}, files=base)


def t_copy(p: Pools, rng: random.Random) -> Draft:
    f = _file(p, rng)
    base = _distractors(p, rng, {f: _text(p.lines(rng, rng.randint(1, 4)))})
    g = _file(p, rng, set(base))
    return Draft(rng.choice(COPY), f"cp {f} {g}",
                 [{"type": "file", "path": g, "content": base[f]}] + _keep(base), {"f": f, "g": g}, files=base)


def t_grep(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    k = p.number(rng, 2, 12)
    f = _file(p, rng)
    want = k + rng.randint(1, 5)
    lines: list[str] = []
    while len(lines) < want:
        lines += [line for line in p.lines(rng, want) if w not in line]
    lines = lines[:want]
    for i in range(k):
        lines[i] = f"{lines[i]} {w}"
    rng.shuffle(lines)
    base = _distractors(p, rng, {f: _text(lines)})
    return Draft(rng.choice(GREP), f"grep -c {w} {f}",
                 [{"type": "output", "text": str(k), "match": "first_token"}] + _keep(base),
                 {"f": f, "w": w, "answer": str(k)}, files=base)


def t_remove(p: Pools, rng: random.Random) -> Draft:
    f = _file(p, rng)
    base = _distractors(p, rng, {f: _text(p.lines(rng, 2))}, 3)
    return Draft(rng.choice(REMOVE), f"rm {f}", [{"type": "absent", "path": f}] + _keep(base, f), {"f": f}, files=base)


CREATE = ["Write the word {w} into a new file {f}.", "Create a file {f} that contains the word {w}.",
          "Put the word {w} in a new file named {f}.", "Make a file {f} holding the single word {w}."]
COUNT = ["How many lines are in {f}?", "Count the lines of {f}.", "Print the number of lines in {f}.",
         "Report how many lines {f} has."]
MOVE = ["Move {f} into a new directory {d}.", "Create the directory {d} and move {f} into it.",
        "Put {f} inside a new folder {d}.", "Make a directory {d} and move the file {f} there."]
TAIL = ["Show the last {n} lines of {f}.", "Print the final {n} lines of {f}.",
        "Display the last {n} lines in {f}.", "Output the bottom {n} lines of {f}."]
FIND = ["List every .{ext} file under {d}.", "Find all files ending in .{ext} inside {d}.",
        "Show the paths of the .{ext} files in {d}.", "Locate each .{ext} file below the directory {d}."]
TAR = ["Archive the directory {d} into {a}.tar.gz.", "Pack {d} into a gzipped tarball named {a}.tar.gz.",
       "Create the archive {a}.tar.gz from the folder {d}.", "Compress the directory {d} as {a}.tar.gz."]
SED = ["Replace every {w1} with {w2} in {f}.", "In {f}, change all occurrences of {w1} to {w2}.",
       "Edit {f} so that every {w1} becomes {w2}.", "Swap each {w1} in {f} for {w2}."]
COPY = ["Copy {f} to {g}.", "Make a copy of {f} named {g}.", "Duplicate the file {f} as {g}.",
        "Create {g} as a copy of {f}."]
GREP = ["How many lines of {f} contain {w}?", "Count the lines in {f} that mention {w}.",
        "Print how many lines of {f} include the word {w}.", "Report the number of lines in {f} with {w}."]
REMOVE = ["Delete the file {f}.", "Remove {f} from the workspace.", "Get rid of the file {f}.",
          "Erase {f}."]

TEMPLATES: dict[str, Template] = {
    "create": t_create, "count": t_count, "move": t_move, "tail": t_tail, "find": t_find,
    "tar": t_tar, "sed": t_sed, "copy": t_copy, "grep": t_grep, "remove": t_remove,
}
SYSTEM_PROMPT = "You are a shell agent. Use the run tool, then call submit."
STOPWORDS = vocabulary(*CREATE, *COUNT, *MOVE, *TAIL, *FIND, *TAR, *SED, *COPY, *GREP, *REMOVE, *EXTENSIONS,
                       SYSTEM_PROMPT, "echo wc mkdir mv tail find name tar czf gz sed cp grep rm ls cat head",
                       "exit code no output truncated killed submitted reward error tool run submit command")
_pools = PoolsBySplit(STOPWORDS)


def generate(split: str, index: int) -> Task:
    return command_task(ENV, TEMPLATES, _pools(split), split, index)


class BashExecEnv(CommandEnv):
    env_name = ENV
    system_prompt = SYSTEM_PROMPT
    tools = run_tools("Run a bash command in the workspace.")

    @classmethod
    def builtin_suite(cls) -> Suite:
        return Suite(ENV, {"train": TRAIN_TASKS, "test": TEST_TASKS}, generate, template_names=tuple(TEMPLATES))
