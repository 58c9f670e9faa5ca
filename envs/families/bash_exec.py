"""bash_exec_env: shell tasks over a prepared directory tree (create, find, count, transform, archive).

One tool, `run`, executes a bash command in the sandbox; the reward checks the final workspace state
and the last command's output. The first ten templates here are each solved by ONE short `run` call that
copies the names from the instruction (docs/learnability.md: a 0.5M-parameter model can learn that), then
`submit`; bash_families.py adds 28 more families (pipelines, archives, permissions, multi-step tasks that
need an error or an output read), five of them held out as the test_families split.
"""
from __future__ import annotations

import random

from envs.core.pools import Pools, PoolsBySplit, vocabulary
from envs.core.task_suite import Suite
from envs.core.tasks import FAMILY_SPLIT, Task, pool_split
from envs.families import bash_families
from envs.families.bash_tree import EXTENSIONS, distractors, file_name, unchanged, text_of
from envs.families.command_env import CommandEnv, Draft, Template, command_task, run_tools

ENV = "bash_exec_env"
TRAIN_TASKS, TEST_TASKS, FAMILY_TASKS = 3000, 100, 100


# ------------------------------------------------------------------ templates

def t_create(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    base = distractors(p, rng, {})
    f = file_name(p, rng, set(base))
    return Draft(rng.choice(CREATE), f"echo {w} > {f}",
                 [{"type": "file", "path": f, "content": w + "\n", "strip": True}] + unchanged(base), {"w": w, "f": f},
                 files=base)


def t_count(p: Pools, rng: random.Random) -> Draft:
    n = p.number(rng, 2, 40)
    f = file_name(p, rng)
    base = distractors(p, rng, {f: text_of(p.lines(rng, n))})
    return Draft(rng.choice(COUNT), f"wc -l < {f}",
                 [{"type": "output", "text": str(n), "match": "first_token"}] + unchanged(base),
                 {"f": f, "answer": str(n)}, files=base)


def t_move(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    d = p.stem(rng)
    base = distractors(p, rng, {f: text_of(p.lines(rng, rng.randint(1, 4)))})
    return Draft(rng.choice(MOVE), f"mkdir -p {d} && mv {f} {d}/",
                 [{"type": "file", "path": f"{d}/{f}", "content": base[f]}, {"type": "absent", "path": f}]
                 + unchanged(base, f), {"f": f, "d": d}, files=base)


def t_tail(p: Pools, rng: random.Random) -> Draft:
    n = p.number(rng, 2, 12)
    f = file_name(p, rng)
    lines = p.lines(rng, n + rng.randint(2, 8))
    base = distractors(p, rng, {f: text_of(lines)})
    return Draft(rng.choice(TAIL), f"tail -n {n} {f}",
                 [{"type": "output", "text": "\n".join(lines[-n:])}] + unchanged(base), {"f": f, "n": str(n)},
                 files=base)


def t_find(p: Pools, rng: random.Random) -> Draft:
    d = p.stem(rng)
    sub = p.stem(rng)
    ext, other = rng.sample(EXTENSIONS, 2)
    hits = [f"{d}/{file_name(p, rng, ext=ext)}", f"{d}/{sub}/{file_name(p, rng, ext=ext)}"][: rng.randint(1, 2)]
    if sub == d:  # keep the nested hit distinct from the top one
        hits = hits[:1]
    files = {h: text_of(p.lines(rng, 1)) for h in hits}
    files[f"{d}/{file_name(p, rng, ext=other)}"] = text_of(p.lines(rng, 1))
    files[file_name(p, rng, ext=ext)] = text_of(p.lines(rng, 1))  # same extension outside the directory
    return Draft(rng.choice(FIND), f"find {d} -name '*.{ext}'",
                 [{"type": "output", "text": "\n".join(hits), "match": "lines"}] + unchanged(files),
                 {"d": d, "ext": ext}, files=files)


def t_tar(p: Pools, rng: random.Random) -> Draft:
    d = p.stem(rng)
    a = p.stem(rng)
    members = [f"{d}/{file_name(p, rng)}" for _ in range(rng.randint(1, 3))]
    files = distractors(p, rng, {m: text_of(p.lines(rng, 2)) for m in members}, 1)
    return Draft(rng.choice(TAR), f"tar czf {a}.tar.gz {d}",
                 [{"type": "tar", "path": f"{a}.tar.gz", "members": members}] + unchanged(files), {"d": d, "a": a},
                 files=files)


def t_sed(p: Pools, rng: random.Random) -> Draft:
    w1, w2 = p.distinct(p.word, rng, 2)
    f = file_name(p, rng)
    lines = p.lines(rng, rng.randint(2, 5))
    for i in rng.sample(range(len(lines)), rng.randint(1, len(lines))):
        lines[i] = f"{lines[i]} {w1}"
    before = text_of(lines)
    base = distractors(p, rng, {f: before})
    return Draft(rng.choice(SED), f"sed -i 's/{w1}/{w2}/g' {f}",
                 [{"type": "file", "path": f, "content": before.replace(w1, w2)}] + unchanged(base, f),
                 {"f": f, "w1": w1, "w2": w2}, files=base)


def t_copy(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    base = distractors(p, rng, {f: text_of(p.lines(rng, rng.randint(1, 4)))})
    g = file_name(p, rng, set(base))
    return Draft(rng.choice(COPY), f"cp {f} {g}",
                 [{"type": "file", "path": g, "content": base[f]}] + unchanged(base), {"f": f, "g": g}, files=base)


def t_grep(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    k = p.number(rng, 2, 12)
    f = file_name(p, rng)
    want = k + rng.randint(1, 5)
    lines: list[str] = []
    while len(lines) < want:
        lines += [line for line in p.lines(rng, want) if w not in line]
    lines = lines[:want]
    for i in range(k):
        lines[i] = f"{lines[i]} {w}"
    rng.shuffle(lines)
    base = distractors(p, rng, {f: text_of(lines)})
    return Draft(rng.choice(GREP), f"grep -c {w} {f}",
                 [{"type": "output", "text": str(k), "match": "first_token"}] + unchanged(base),
                 {"f": f, "w": w, "answer": str(k)}, files=base)


def t_remove(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    base = distractors(p, rng, {f: text_of(p.lines(rng, 2))}, 3)
    return Draft(rng.choice(REMOVE), f"rm {f}", [{"type": "absent", "path": f}] + unchanged(base, f), {"f": f},
                 files=base)


CREATE = ["Save the single word {w} as the content of {f}.", "Create {f}; its only content is {w}.",
          "Write the word {w} into a new file {f}.", "Create a file {f} that contains the word {w}.",
          "Put the word {w} in a new file named {f}.", "Make a file {f} holding the single word {w}."]
COUNT = ["What is the line count of {f}?", "Tell me the number of lines that {f} contains.",
         "How many lines are in {f}?", "Count the lines of {f}.", "Print the number of lines in {f}.",
         "Report how many lines {f} has."]
MOVE = ["Relocate {f} into a directory called {d}, creating it.", "{f} belongs in a new folder {d}: move it.",
        "Move {f} into a new directory {d}.", "Create the directory {d} and move {f} into it.",
        "Put {f} inside a new folder {d}.", "Make a directory {d} and move the file {f} there."]
TAIL = ["What are the last {n} lines of {f}?", "Print the tail of {f}: its final {n} lines.",
        "Show the last {n} lines of {f}.", "Print the final {n} lines of {f}.",
        "Display the last {n} lines in {f}.", "Output the bottom {n} lines of {f}."]
FIND = ["Which files in {d} end with .{ext}? List their paths.", "Search {d}, subfolders too, for .{ext} files.",
        "List every .{ext} file under {d}.", "Find all files ending in .{ext} inside {d}.",
        "Show the paths of the .{ext} files in {d}.", "Locate each .{ext} file below the directory {d}."]
TAR = ["Make a tar.gz of the folder {d} called {a}.tar.gz.", "Bundle {d} into the gzipped archive {a}.tar.gz.",
       "Archive the directory {d} into {a}.tar.gz.", "Pack {d} into a gzipped tarball named {a}.tar.gz.",
       "Create the archive {a}.tar.gz from the folder {d}.", "Compress the directory {d} as {a}.tar.gz."]
SED = ["Substitute {w2} for each {w1} in the file {f}.", "Every {w1} in {f} should read {w2}: fix the file.",
       "Replace every {w1} with {w2} in {f}.", "In {f}, change all occurrences of {w1} to {w2}.",
       "Edit {f} so that every {w1} becomes {w2}.", "Swap each {w1} in {f} for {w2}."]
COPY = ["Clone the file {f} to a new file {g}.", "{g} should be an exact copy of {f}.", "Copy {f} to {g}.",
        "Make a copy of {f} named {g}.", "Duplicate the file {f} as {g}.",
        "Create {g} as a copy of {f}."]
GREP = ["In {f}, on how many lines does {w} appear?", "Tell me how many lines of {f} have {w} in them.",
        "How many lines of {f} contain {w}?", "Count the lines in {f} that mention {w}.",
        "Print how many lines of {f} include the word {w}.", "Report the number of lines in {f} with {w}."]
REMOVE = ["{f} is not needed any more: delete it.", "Remove the file named {f}.", "Delete the file {f}.",
          "Remove {f} from the workspace.", "Get rid of the file {f}.",
          "Erase {f}."]

TEMPLATES: dict[str, Template] = {
    "create": t_create, "count": t_count, "move": t_move, "tail": t_tail, "find": t_find,
    "tar": t_tar, "sed": t_sed, "copy": t_copy, "grep": t_grep, "remove": t_remove, **bash_families.TEMPLATES,
}
HELD_OUT = bash_families.HELD_OUT
SYSTEM_PROMPT = "You are a shell agent. Use the run tool, then call submit."
STOPWORDS = vocabulary(*CREATE, *COUNT, *MOVE, *TAIL, *FIND, *TAR, *SED, *COPY, *GREP, *REMOVE, *EXTENSIONS,
                       *bash_families.PHRASINGS, bash_families.COMMAND_WORDS,
                       SYSTEM_PROMPT, "echo wc mkdir mv tail find name tar czf gz sed cp grep rm ls cat head",
                       "exit code no output truncated killed submitted reward error tool run submit command")
_pools = PoolsBySplit(STOPWORDS)


def generate(split: str, index: int, template: str) -> Task:
    return command_task(ENV, TEMPLATES, _pools(pool_split(split)), split, index, template)


class BashExecEnv(CommandEnv):
    env_name = ENV
    system_prompt = SYSTEM_PROMPT
    tools = run_tools("Run a bash command in the workspace.")

    @classmethod
    def builtin_suite(cls) -> Suite:
        return Suite(ENV, {"train": TRAIN_TASKS, "test": TEST_TASKS, FAMILY_SPLIT: FAMILY_TASKS}, generate,
                     template_names=tuple(TEMPLATES), held_out=HELD_OUT)
