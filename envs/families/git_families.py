"""git_repo_env's task families beyond the first eleven (issue 24): branches (delete, rename, force-delete,
branch from an old commit), the stash (save, switch with pending edits, pop), conflicts (keep ours), undoing
(discard, unstage, undo a commit, restore an old version), history questions and .gitignore.

Checks look at the repository (refs, trees, the index, the stash) with plumbing run by the checker, never at
what the agent printed, except for history questions whose answer lives only in the history. Two families
start with a command that fails and says what to do (`git branch -d` on an unmerged branch, `git checkout`
over pending edits). Families in HELD_OUT form the test_families split only.
"""
from __future__ import annotations

import random

from envs.core.pools import Pools
from envs.families.command_env import Draft, cmd, sh
from envs.families.git_script import (CLEAN, ON_MAIN, base_repo, commit_all, conflict_repo, merge_resolved, message, new_name,
                                      write_lines)


IGNORED_EXTENSIONS = ("log", "dat", "xml", "json")  # bash_exec's closed extension set: never a slot value


ONE_STASH = sh("git rev-parse -q --verify refs/stash >/dev/null && ! git rev-parse -q --verify 'stash@{1}' >/dev/null")


def _branch_absent(b: str) -> dict:
    return cmd(["git", "rev-parse", "-q", "--verify", f"refs/heads/{b}"], returncode=1)


def _side_branch(p: Pools, rng: random.Random, names: set[str], setup: list[str]) -> tuple[str, str]:
    """A branch b with one commit adding a file, main checked out again; returns (b, its commit message)."""
    b = new_name(p, rng, names)
    h = new_name(p, rng, names, ext=True)
    m = message(p, rng)
    setup += [f"git checkout -qb {b}", write_lines(h, p.lines(rng, 2)), commit_all(m), "git checkout -q main"]
    return b, m


def _edited(p: Pools, rng: random.Random, files: dict[str, list[str]]) -> tuple[str, list[str]]:
    """A committed file and new lines for it that differ from the committed ones."""
    f = rng.choice(sorted(files))
    new = p.lines(rng, 2)
    while new == files[f]:
        new = p.lines(rng, 2)
    return f, new


def _text(lines: list[str]) -> str:
    return "".join(x + "\n" for x in lines)


def t_delete_branch(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b, _ = _side_branch(p, rng, names, setup)
    setup.append(f"git merge -q --no-edit {b}")
    return Draft(rng.choice(DELETE_BRANCH), f"git branch -d {b}", [_branch_absent(b), ON_MAIN], {"b": b}, setup=setup)


def t_force_delete(p: Pools, rng: random.Random) -> Draft:
    """`git branch -d` refuses an unmerged branch and names the flag that does it."""
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b, _ = _side_branch(p, rng, names, setup)
    return Draft(rng.choice(FORCE_DELETE), f"git branch -D {b}",
                 [_branch_absent(b), ON_MAIN, cmd(["git", "rev-list", "--count", "--all"],
                                                  str(sum(1 for s in setup if "commit -qm" in s) - 1))],
                 {"b": b}, setup=setup, before=(f"git branch -d {b}",))


def t_rename_branch(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    b, _ = _side_branch(p, rng, names, setup)
    c = new_name(p, rng, names)
    return Draft(rng.choice(RENAME_BRANCH), f"git branch -m {b} {c}",
                 [_branch_absent(b), sh(f"git merge-base --is-ancestor main {c}"),
                  sh(f'test "$(git rev-list --count main..{c})" = 1'), ON_MAIN], {"b": b, "c": c}, setup=setup)


def t_branch_at(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    m, m2 = message(p, rng), message(p, rng)
    b = new_name(p, rng, names)
    setup += [write_lines(f, p.lines(rng, 2)), commit_all(m), write_lines(f, p.lines(rng, 2)), commit_all(m2)]
    return Draft(rng.choice(BRANCH_AT), f"git branch {b} ':/{m}'",
                 [cmd(["git", "log", "-1", "--format=%s", f"refs/heads/{b}"], m), ON_MAIN,
                  cmd(["git", "log", "-1", "--format=%s", "main"], m2)], {"b": b, "m": m}, setup=setup)


def t_stash(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f, new = _edited(p, rng, files)
    setup.append(write_lines(f, new))
    return Draft(rng.choice(STASH), "git stash -q",
                 [CLEAN, ONE_STASH, cmd(["git", "show", f"stash@{{0}}:{f}"], "\n".join(new)), ON_MAIN],
                 {"f": f}, setup=setup)


def t_stash_pop(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f, new = _edited(p, rng, files)
    setup += [write_lines(f, new), "git stash -q"]
    return Draft(rng.choice(STASH_POP), "git stash pop -q",
                 [{"type": "file", "path": f, "content": _text(new)}, cmd(["git", "stash", "list"], ""), ON_MAIN],
                 {"f": f}, setup=setup)


def t_switch_dirty(p: Pools, rng: random.Random) -> Draft:
    """`git checkout b` refuses to overwrite pending edits of f: stash them first."""
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f, new = _edited(p, rng, files)
    b = new_name(p, rng, names)
    theirs = p.lines(rng, 2)
    setup += [f"git checkout -qb {b}", write_lines(f, theirs), commit_all(message(p, rng)), "git checkout -q main",
              write_lines(f, new)]
    return Draft(rng.choice(SWITCH_DIRTY), f"git stash -q && git checkout -q {b}",
                 [cmd(["git", "symbolic-ref", "--short", "HEAD"], b), CLEAN,
                  ONE_STASH, cmd(["git", "show", f"stash@{{0}}:{f}"], "\n".join(new))], {"b": b, "f": f}, setup=setup,
                 before=(f"git checkout {b}",))


def t_conflict_ours(p: Pools, rng: random.Random) -> Draft:
    setup, f, b, ours, _ = conflict_repo(p, rng)
    return Draft(rng.choice(CONFLICT_OURS), f"git checkout --ours {f} && git add {f} && git commit -q --no-edit",
                 merge_resolved(f, ours), {"f": f, "b": b}, setup=setup)


def t_discard(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f, new = _edited(p, rng, files)
    setup.append(write_lines(f, new))
    return Draft(rng.choice(DISCARD), f"git checkout -- {f}",
                 [{"type": "file", "path": f, "content": _text(files[f])}, CLEAN, ON_MAIN], {"f": f}, setup=setup)


def t_unstage(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f, new = _edited(p, rng, files)
    setup += [write_lines(f, new), f"git add {f}"]
    return Draft(rng.choice(UNSTAGE), f"git reset -q {f}",
                 [cmd(["git", "diff", "--cached", "--name-only"], ""),
                  {"type": "file", "path": f, "content": _text(new)},
                  cmd(["git", "diff", "--name-only"], f), ON_MAIN], {"f": f}, setup=setup)


def t_undo_commit(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    lines = p.lines(rng, 2)
    m = message(p, rng)
    setup += [write_lines(f, lines), commit_all(m)]
    n = sum(1 for s in setup if "commit -qm" in s)
    return Draft(rng.choice(UNDO_COMMIT), "git reset -q --soft HEAD~1",
                 [cmd(["git", "rev-list", "--count", "HEAD"], str(n - 1)),
                  cmd(["git", "diff", "--cached", "--name-only"], f),
                  {"type": "file", "path": f, "content": _text(lines)},
                  ON_MAIN], {"m": m}, setup=setup)


def t_restore_old(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    old, newer = p.lines(rng, 2), p.lines(rng, 2)
    m, m2, m3 = message(p, rng), message(p, rng), message(p, rng)
    setup += [write_lines(f, old), commit_all(m), write_lines(f, newer), commit_all(m2)]
    return Draft(rng.choice(RESTORE_OLD), f"git checkout ':/{m}' -- {f} && git commit -qm '{m3}'",
                 [cmd(["git", "show", f"HEAD:{f}"], "\n".join(old)), cmd(["git", "log", "-1", "--format=%s"], m3),
                  CLEAN, ON_MAIN], {"f": f, "m": m, "m3": m3}, setup=setup)


def t_log_count(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, files = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    g = next(iter(files))
    touched = 0
    for _ in range(rng.randint(2, 6)):
        target = f if rng.random() < 0.6 or touched == 0 else g
        touched += target == f
        setup += [write_lines(target, p.lines(rng, 2)), commit_all(message(p, rng))]
    return Draft(rng.choice(LOG_COUNT), f"git log --oneline -- {f} | wc -l",
                 [{"type": "output", "text": str(touched), "match": "first_token"}, CLEAN, ON_MAIN], {"f": f},
                 setup=setup)


def t_added_by(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    f = new_name(p, rng, names, ext=True)
    m = message(p, rng)
    setup += [write_lines(f, p.lines(rng, 2)), commit_all(m)]
    for _ in range(rng.randint(1, 3)):
        setup += [write_lines(f, p.lines(rng, 2)), commit_all(message(p, rng))]
    return Draft(rng.choice(ADDED_BY), f"git log --diff-filter=A --format=%s -- {f}",
                 [{"type": "output", "text": m}, CLEAN, ON_MAIN], {"f": f}, setup=setup)


def t_ignore(p: Pools, rng: random.Random) -> Draft:
    names: set[str] = set()
    setup, _ = base_repo(p, rng, names)
    ext = rng.choice(IGNORED_EXTENSIONS)
    junk = new_name(p, rng, names) + f".{ext}"
    m = message(p, rng)
    setup.append(write_lines(junk, p.lines(rng, 1)))
    return Draft(rng.choice(IGNORE), f"echo '*.{ext}' >> .gitignore && git add .gitignore && git commit -qm '{m}'",
                 [cmd(["git", "check-ignore", "-q", f"x.{ext}"]), cmd(["git", "cat-file", "-e", "HEAD:.gitignore"]),
                  cmd(["git", "log", "-1", "--format=%s"], m), CLEAN, ON_MAIN], {"ext": ext, "m": m}, setup=setup)


DELETE_BRANCH = ["Delete the branch {b}; it is already merged.", "Remove the merged branch {b}.",
                 "Clean up: {b} has been merged into main, delete it.", "Get rid of the branch {b}.",
                 "The branch {b} is no longer needed; delete it."]
FORCE_DELETE = ["Delete the branch {b}, even though it was never merged.", "Throw away the branch {b} and its work.",
                "Remove the branch {b} for good, unmerged commits and all.",
                "Delete {b}; its commits are not needed.", "Force the deletion of the branch {b}."]
RENAME_BRANCH = ["Rename the branch {b} to {c}.", "Give the branch {b} the new name {c}.",
                 "Change the name of {b} to {c}.",
                 "The branch {b} should be called {c} from now on.", "Move the branch name {b} to {c}."]
BRANCH_AT = ["Create a branch {b} at the commit '{m}'.", "Start a branch {b} from the older commit '{m}'.",
             "Make a branch named {b} that points at the commit '{m}'.",
             "Add a branch {b} at the commit whose message is '{m}', staying on main.",
             "Put a new branch {b} on the commit '{m}'."]
STASH = ["Put your uncommitted changes to {f} away in the stash.", "Stash the pending edits of {f}.",
         "Save the changes to {f} in the stash and leave a clean working tree.",
         "Shelve the uncommitted work on {f} with git stash.", "Set the modifications of {f} aside in a stash."]
STASH_POP = ["Bring back the changes you stashed.", "Apply the stashed edits again and drop the stash.",
             "Restore the work saved in the stash to {f}.", "Pop the stash.",
             "Get the stashed modifications of {f} back into the working tree."]
SWITCH_DIRTY = ["Switch to the branch {b}, keeping your uncommitted edits to {f} in the stash.",
                "Check out {b}; stash the pending changes of {f} first.",
                "Move to the branch {b} without losing the edits of {f} (put them in the stash).",
                "Go to branch {b}. Your work on {f} must be saved in a stash.",
                "Change to {b} while the uncommitted changes to {f} stay safe in the stash."]
CONFLICT_OURS = ["Resolve the merge conflict in {f} by keeping the version on main, then commit.",
                 "Finish the merge of {b}: keep our side of {f} and commit.",
                 "The merge of {b} conflicts in {f}; keep main's version and complete the merge.",
                 "Settle the conflict in {f} in favour of main and commit the merge.",
                 "Complete the merge of {b}, discarding its changes to {f}."]
DISCARD = ["Throw away the uncommitted changes to {f}.", "Discard the edits of {f} since the last commit.",
           "Reset {f} to its committed version.", "Undo the pending modifications of {f}.",
           "Make {f} match the last commit again."]
UNSTAGE = ["Unstage {f} without losing its changes.", "Take {f} out of the index but keep the edits.",
           "Remove {f} from the staging area; do not touch the file itself.",
           "The changes to {f} were staged by mistake: unstage them.",
           "Keep the modifications of {f}, but unstage them."]
UNDO_COMMIT = ["Undo the last commit ('{m}') but keep its changes staged.",
               "Take back the commit '{m}'; its changes must stay in the index.",
               "Remove the latest commit '{m}' from the history without losing its work (keep it staged).",
               "Un-commit '{m}', leaving the files staged.", "Soft-reset away the commit '{m}'."]
RESTORE_OLD = ["Restore {f} to how it was in the commit '{m}' and commit that as '{m3}'.",
               "Bring back the version of {f} from the commit '{m}', then commit it with the message '{m3}'.",
               "Roll {f} back to its state at '{m}' and record it in a commit '{m3}'.",
               "Take {f} from the commit '{m}' and commit the result as '{m3}'.",
               "Revert just the file {f} to the commit '{m}'; commit with message '{m3}'."]
LOG_COUNT = ["How many commits have touched {f}?", "Count the commits that changed {f}.",
             "Report the number of commits in the history of {f}.", "In how many commits was {f} modified or added?",
             "Tell me how many commits include changes to {f}."]
ADDED_BY = ["What is the message of the commit that added {f}?", "Which commit created {f}? Print its message.",
            "Show the subject of the commit that first added {f}.",
            "Find the commit that introduced {f} and print its message.",
            "Print the message of the commit where {f} first appeared."]
IGNORE = ["Make git ignore every .{ext} file, and commit the .gitignore as '{m}'.",
          "Add a .gitignore rule for *.{ext} files and commit it with the message '{m}'.",
          "Stop git from tracking .{ext} files: write the ignore rule and commit it as '{m}'.",
          "Ignore all files ending in .{ext}; commit the change with message '{m}'.",
          "Set up .gitignore so .{ext} files are ignored, committed as '{m}'."]

TEMPLATES = {
    "delete_branch": t_delete_branch, "force_delete": t_force_delete, "branch_at": t_branch_at, "stash": t_stash,
    "switch_dirty": t_switch_dirty, "conflict_ours": t_conflict_ours, "discard": t_discard,
    "undo_commit": t_undo_commit, "restore_old": t_restore_old, "log_count": t_log_count, "ignore": t_ignore,
    # held out (test_families only)
    "rename_branch": t_rename_branch, "stash_pop": t_stash_pop, "unstage": t_unstage, "added_by": t_added_by,
}
HELD_OUT = ("rename_branch", "stash_pop", "unstage", "added_by")
PHRASINGS = [*DELETE_BRANCH, *FORCE_DELETE, *RENAME_BRANCH, *BRANCH_AT, *STASH, *STASH_POP, *SWITCH_DIRTY,
             *CONFLICT_OURS, *DISCARD, *UNSTAGE, *UNDO_COMMIT, *RESTORE_OLD, *LOG_COUNT, *ADDED_BY, *IGNORE]
COMMAND_WORDS = ("stash pop list show diff cached only name oneline format filter check ignore gitignore verify "
                 "soft quiet echo wc porcelain status count all x " + " ".join(IGNORED_EXTENSIONS))
