"""git_repo_env: tasks on a scripted repository (commit, branch, merge, conflict, revert, cherry-pick,
bisect, recover a deleted branch, tag, amend; git_families.py adds branches, the stash, undoing, history
questions and .gitignore, four of them held out as the test_families split). Tool `run` executes a command;
the reward checks the repository state with plumbing commands run by the checker (hooks and fsmonitor
disabled).

Author, committer and dates are fixed in the sandbox environment, so commit hashes, and with them the
episodes, are the same on every run.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from envs.core.pools import Pools, PoolsBySplit, vocabulary
from envs.core.task_suite import Suite
from envs.core.tasks import FAMILY_SPLIT, Task, pool_split
from envs.families import git_families
from envs.families.command_env import CommandEnv, Draft, Template, cmd, command_task, run_tools, sh
from envs.families.git_script import (EXTENSIONS, NO_MERGE, ON_MAIN, base_repo, commit_all, conflict_repo, merge_resolved,
                                      message, new_name, write_lines)
from envs.sandbox.sandbox import Sandbox

ENV = "git_repo_env"
TRAIN_TASKS, TEST_TASKS, FAMILY_TASKS = 3000, 100, 100
GIT_ENV = {
    "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_PAGER": "cat", "PAGER": "cat",
    "GIT_EDITOR": "true", "GIT_TERMINAL_PROMPT": "0",
    # init.defaultBranch for the setup; advice off keeps observations short.
    "GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "init.defaultBranch", "GIT_CONFIG_VALUE_0": "main",
    "GIT_CONFIG_KEY_1": "advice.detachedHead", "GIT_CONFIG_VALUE_1": "false",
}


def t_commit(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    lines = p.lines(rng, 2)
    m = message(p, rng)
    return Draft(rng.choice(COMMIT), f"git add {f} && git commit -qm '{m}'",
                 [cmd(["git", "log", "-1", "--format=%s"], m), cmd(["git", "show", f"HEAD:{f}"], "\n".join(lines)),
                  ON_MAIN], {"f": f, "m": m}, setup=setup + [write_lines(f, lines)])


def t_branch(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b = new_name(p, rng, names)
    return Draft(rng.choice(BRANCH), f"git branch {b}",
                 [sh(f'test "$(git rev-parse -q --verify refs/heads/{b})" = "$(git rev-parse HEAD)"'), ON_MAIN],
                 {"b": b}, setup=setup)


def t_switch(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b = new_name(p, rng, names)
    return Draft(rng.choice(SWITCH), f"git checkout -qb {b}",
                 [cmd(["git", "symbolic-ref", "--short", "HEAD"], b),
                  sh(f'test "$(git rev-parse {b})" = "$(git rev-parse main)"')], {"b": b}, setup=setup)


def t_merge(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b = new_name(p, rng, names)
    f, g = new_name(p, rng, names, ext=True), new_name(p, rng, names, ext=True)
    fl, gl = p.lines(rng, 2), p.lines(rng, 2)
    setup += [f"git checkout -qb {b}", write_lines(f, fl), commit_all(message(p, rng)), "git checkout -q main"]
    if rng.random() < 0.5:  # half the merges are true merges, half fast-forwards
        setup += [write_lines(g, gl), commit_all(message(p, rng))]
    return Draft(rng.choice(MERGE), f"git merge -q --no-edit {b}",
                 [sh(f"git merge-base --is-ancestor {b} HEAD"), ON_MAIN, NO_MERGE,
                  cmd(["git", "show", f"HEAD:{f}"], "\n".join(fl))], {"b": b}, setup=setup)


def t_conflict(p: Pools, rng: random.Random) -> Draft:
    setup, f, b, _, theirs = conflict_repo(p, rng)
    return Draft(rng.choice(CONFLICT), f"git checkout --theirs {f} && git add {f} && git commit -q --no-edit",
                 merge_resolved(f, theirs), {"f": f, "b": b}, setup=setup)


def t_revert(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f = next(iter(files))
    m, m2 = message(p, rng), message(p, rng)
    g = new_name(p, rng, names, ext=True)
    changed = p.lines(rng, 2)
    setup += [write_lines(f, changed), commit_all(m), write_lines(g, p.lines(rng, 2)), commit_all(m2)]
    return Draft(rng.choice(REVERT), f"git revert --no-edit ':/{m}'",
                 [cmd(["git", "show", f"HEAD:{f}"], "\n".join(files[f])), cmd(["git", "cat-file", "-e", f"HEAD:{g}"]),
                  cmd(["git", "log", "-1", "--format=%s"], f'Revert "{m}"'), ON_MAIN], {"m": m}, setup=setup)


def t_cherry_pick(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b = new_name(p, rng, names)
    h, k = new_name(p, rng, names, ext=True), new_name(p, rng, names, ext=True)
    hl = p.lines(rng, 2)
    m, m2 = message(p, rng), message(p, rng)
    setup += [f"git checkout -qb {b}", write_lines(h, hl), commit_all(m), write_lines(k, p.lines(rng, 2)),
              commit_all(m2),
              "git checkout -q main"]
    return Draft(rng.choice(CHERRY), f"git cherry-pick ':/{m}'",
                 [cmd(["git", "show", f"HEAD:{h}"], "\n".join(hl)), cmd(["git", "cat-file", "-e", f"HEAD:{k}"],
                                                                       returncode=128),
                  cmd(["git", "log", "-1", "--format=%s"], m), ON_MAIN], {"m": m, "b": b}, setup=setup)


def t_bisect(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    f = new_name(p, rng, names, ext=True)
    w = p.word(rng)
    t = new_name(p, rng, names)
    n = rng.randint(5, 9)
    bad = rng.randint(1, n - 1)
    lines = [x for x in p.lines(rng, n) if w not in x]
    while len(lines) < n:
        lines += [x for x in p.lines(rng, n) if w not in x]
    lines = lines[:n]
    setup = ["git init -q ."]
    msgs = []
    for i in range(n):
        line = f"{lines[i]} {w}" if i == bad else lines[i]
        msgs.append(f"{p.word(rng)} {p.word(rng)}")
        setup += [f"printf '%s\\n' '{line}' >> {f}", commit_all(msgs[-1])]
    command = (f"git bisect start HEAD $(git rev-list --max-parents=0 HEAD) && "
               f"git bisect run sh -c '! grep -q {w} {f}' && git tag {t} refs/bisect/bad && git bisect reset")
    return Draft(rng.choice(BISECT), command,
                 [cmd(["git", "log", "-1", "--format=%s", f"refs/tags/{t}"], msgs[bad]), ON_MAIN,
                  sh("test ! -e .git/BISECT_LOG")], {"f": f, "w": w, "t": t}, setup=setup)


def t_recover(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b = new_name(p, rng, names)
    h = new_name(p, rng, names, ext=True)
    m = message(p, rng)
    setup += [f"git checkout -qb {b}", write_lines(h, p.lines(rng, 2)), commit_all(m), "git checkout -q main",
              f"git branch -qD {b}"]
    return Draft(rng.choice(RECOVER), f"git branch {b} HEAD@{{1}}",
                 [cmd(["git", "log", "-1", "--format=%s", f"refs/heads/{b}"], m), ON_MAIN], {"b": b}, setup=setup)


def t_tag(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    t = new_name(p, rng, names)
    return Draft(rng.choice(TAG), f"git tag {t}",
                 [sh(f'test "$(git rev-parse -q --verify refs/tags/{t})" = "$(git rev-parse HEAD)"')], {"t": t},
                 setup=setup)


def t_amend(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    m = message(p, rng)
    return Draft(rng.choice(AMEND), f"git commit --amend -qm '{m}'",
                 [cmd(["git", "log", "-1", "--format=%s"], m),
                  cmd(["git", "rev-list", "--count", "HEAD"], str(sum(1 for s in setup if "commit -qm" in s)))],
                 {"m": m}, setup=setup)


COMMIT = ["Commit the file {f} with the message '{m}'.", "Add {f} and commit it as '{m}'.",
          "Record {f} in a new commit with message '{m}'.", "Stage {f} and commit with the message '{m}'."]
BRANCH = ["Create a branch {b} at the current commit.", "Make a new branch named {b} here.",
          "Add a branch {b} pointing at HEAD.", "Start a branch {b} from the current commit, staying on main."]
SWITCH = ["Create a branch {b} and switch to it.", "Check out a new branch named {b}.",
          "Start working on a new branch {b}.", "Switch to a new branch {b}."]
MERGE = ["Merge the branch {b} into main.", "Bring the changes of {b} into main with a merge.",
         "Merge {b} into the main branch.", "Integrate branch {b} into main."]
CONFLICT = ["Resolve the merge conflict in {f} by keeping the version from {b}, then commit.",
            "Finish the merge of {b}: take their side of {f} and commit.",
            "The merge of {b} conflicts in {f}; keep {b}'s version and complete the merge.",
            "Settle the conflict in {f} in favour of {b} and commit the merge."]
REVERT = ["Revert the commit with the message '{m}'.", "Undo the commit '{m}' with a revert.",
          "Create a revert of the commit '{m}'.", "Back out the commit named '{m}'."]
CHERRY = ["Apply only the commit '{m}' from branch {b} onto main.", "Cherry-pick the commit '{m}' of {b} onto main.",
          "Copy the commit '{m}' from {b} to main.", "Bring just the commit '{m}' from {b} into main."]
BISECT = ["Tag the first commit whose {f} contains {w} as {t}.",
          "Find the commit that introduced {w} into {f} and tag it {t}.",
          "Bisect to the first commit with {w} in {f} and tag it {t}.",
          "Tag as {t} the commit where {w} first appears in {f}."]
RECOVER = ["Recover the deleted branch {b}.", "The branch {b} was deleted by mistake; bring it back.",
           "Restore the branch {b} that was just deleted.", "Recreate the lost branch {b} at its old commit."]
TAG = ["Tag the current commit as {t}.", "Create a tag {t} on HEAD.", "Add the tag {t} to the latest commit.",
       "Mark the current commit with the tag {t}."]
AMEND = ["Change the last commit message to '{m}'.", "Amend the latest commit so its message is '{m}'.",
         "Reword the last commit as '{m}'.", "Fix the message of the last commit to read '{m}'."]

TEMPLATES: dict[str, Template] = {
    "commit": t_commit, "branch": t_branch, "switch": t_switch, "merge": t_merge, "conflict": t_conflict,
    "revert": t_revert, "cherry_pick": t_cherry_pick, "bisect": t_bisect, "recover": t_recover,
    "tag": t_tag, "amend": t_amend, **git_families.TEMPLATES,
}
HELD_OUT = git_families.HELD_OUT
SYSTEM_PROMPT = "You are a git agent. Use the run tool, then call submit."
STOPWORDS = vocabulary(*COMMIT, *BRANCH, *SWITCH, *MERGE, *CONFLICT, *REVERT, *CHERRY, *BISECT, *RECOVER, *TAG,
                       *AMEND, *EXTENSIONS, SYSTEM_PROMPT, *git_families.PHRASINGS, git_families.COMMAND_WORDS,
                       "git add commit branch checkout merge revert cherry pick bisect start run reset tag amend HEAD "
                       "refs bad good main theirs ours edit rev list parents max printf sh grep exit code no output "
                       "truncated killed submitted reward error tool submit command agent example com")
_pools = PoolsBySplit(STOPWORDS)


def generate(split: str, index: int, template: str) -> Task:
    return command_task(ENV, TEMPLATES, _pools(pool_split(split)), split, index, template)


class RepoCache:
    """Built repositories, kept per process: a task's setup runs once, later episodes copy the result.

    Online RL plays every task several times (a GRPO group), and the setup is a dozen git commands.
    The copy is taken right after the setup, before any agent command, so it holds only what the
    task's own (trusted) setup made; hashes and reflogs are reproducible because dates are fixed."""

    def __init__(self, max_entries: int = 512):
        self.max_entries = max_entries
        self._dir: Path | None = None
        self._entries: OrderedDict[str, Path] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(task: Task) -> str:
        return hashlib.blake2b(json.dumps([task.files, task.setup]).encode(), digest_size=16).hexdigest()

    def restore(self, task: Task, box: Sandbox) -> bool:
        with self._lock:
            src = self._entries.get(self.key(task))
            if src is None:
                return False
            self._entries.move_to_end(self.key(task))
        shutil.copytree(src, box.workspace, symlinks=True, dirs_exist_ok=True)
        if box.own_uid:
            for root, dirs, files in os.walk(box.workspace):
                for name in dirs + files:
                    os.lchown(os.path.join(root, name), box.uid, box.gid)
        return True

    def store(self, task: Task, box: Sandbox) -> None:
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="lachesis-git-cache-"))
                os.chmod(self._dir, 0o700)
                atexit.register(shutil.rmtree, self._dir, True)
            key = self.key(task)
            if key in self._entries:
                return
            dst = self._dir / key
            shutil.copytree(box.workspace, dst, symlinks=True)
            self._entries[key] = dst
            while len(self._entries) > self.max_entries:
                _, old = self._entries.popitem(last=False)
                shutil.rmtree(old, ignore_errors=True)


_REPOS = RepoCache()


class GitRepoEnv(CommandEnv):
    env_name = ENV
    system_prompt = SYSTEM_PROMPT
    sandbox_env = GIT_ENV
    tools = run_tools("Run a shell command (git is available) in the repository.")

    @classmethod
    def builtin_suite(cls) -> Suite:
        return Suite(ENV, {"train": TRAIN_TASKS, "test": TEST_TASKS, FAMILY_SPLIT: FAMILY_TASKS}, generate,
                     template_names=tuple(TEMPLATES), held_out=HELD_OUT)

    def prepare(self, box: Sandbox, task: Task) -> None:
        if not task.setup or _REPOS.restore(task, box):
            return
        super().prepare(box, task)
        _REPOS.store(task, box)
