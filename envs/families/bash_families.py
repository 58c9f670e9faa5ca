"""bash_exec_env's task families beyond the first ten (issue 24): find/xargs, sed/awk, sort/uniq/cut pipelines,
archives, permissions, text statistics, safe deletion by pattern, quoting, and multi-step tasks whose first
command fails (the error says what to do next) or whose answer needs an earlier command's output.

Each family teaches a skill, not a template: five or more phrasings, trees of varying shape and naming
(bash_tree.py), and checks that the work was done (files changed, everything else kept) rather than an answer
printed. Questions whose answer is a number or a name can be answered only from the files, which the checks
compare; a task that changes files is judged by the files alone. Families in HELD_OUT form the test_families
split: no train or test task comes from them, only from their parts (find, wc, tar, sed, awk seen elsewhere).
"""
from __future__ import annotations

import random

from envs.core.pools import Pools
from envs.families.bash_tree import EXTENSIONS, dir_path, distractors, file_name, text_of, tree, unchanged
from envs.families.command_env import Draft, cmd, sh


def _other_ext(rng: random.Random, ext: str) -> str:
    return rng.choice([e for e in EXTENSIONS if e != ext])


def _files_under(p: Pools, rng: random.Random, d: str, ext: str, hits: int) -> tuple[list[str], dict[str, str]]:
    """`hits` .ext files under d (nested), two other files under d, one .ext file outside d."""
    taken: set[str] = set()
    paths = tree(p, rng, d, hits, ext, taken)
    others = tree(p, rng, d, 2, _other_ext(rng, ext), taken)
    outside = file_name(p, rng, ext=ext)
    files = {x: text_of(p.lines(rng, rng.randint(1, 4))) for x in paths + others + [outside]}
    return paths, files


def _without(p: Pools, rng: random.Random, n: int, *words: str) -> list[str]:
    """n lines that contain none of `words` (not even as a part of a longer word)."""
    out: list[str] = []
    while len(out) < n:
        out += [x for x in p.lines(rng, n) if not any(w in x for w in words)]
    return out[:n]


# ------------------------------------------------------------------ find / xargs / safe deletion

def t_find_delete(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, rng.choice((1, 2)))
    ext = rng.choice(EXTENSIONS)
    hits, files = _files_under(p, rng, d, ext, rng.randint(2, 4))
    return Draft(rng.choice(FIND_DELETE), f"find {d} -name '*.{ext}' -delete",
                 [{"type": "absent", "path": h} for h in hits] + unchanged(files, *hits), {"d": d, "ext": ext},
                 files=files)


def t_find_count(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, rng.choice((1, 2)))
    ext = rng.choice(EXTENSIONS)
    hits, files = _files_under(p, rng, d, ext, rng.randint(1, 5))
    return Draft(rng.choice(FIND_COUNT), f"find {d} -name '*.{ext}' | wc -l",
                 [{"type": "output", "text": str(len(hits)), "match": "first_token"}] + unchanged(files),
                 {"d": d, "ext": ext}, files=files)


def t_empty_delete(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, rng.choice((1, 2)))
    taken: set[str] = set()
    empty = tree(p, rng, d, rng.randint(1, 3), taken=taken)
    full = tree(p, rng, d, rng.randint(1, 3), taken=taken)
    files = {**{e: "" for e in empty}, **{f: text_of(p.lines(rng, 2)) for f in full}}
    files[file_name(p, rng, set(files))] = ""  # an empty file outside d stays
    return Draft(rng.choice(EMPTY_DELETE), f"find {d} -type f -empty -delete",
                 [{"type": "absent", "path": e} for e in empty] + unchanged(files, *empty), {"d": d}, files=files)


def t_grep_files(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, rng.choice((1, 2)))
    w = p.word(rng)
    taken: set[str] = set()
    hits = tree(p, rng, d, rng.randint(1, 3), taken=taken)
    misses = tree(p, rng, d, rng.randint(1, 3), taken=taken)
    files = {}
    for h in hits:
        lines = _without(p, rng, rng.randint(2, 4), w)
        lines[rng.randrange(len(lines))] += f" {w}"
        files[h] = text_of(lines)
    files.update({m: text_of(_without(p, rng, rng.randint(1, 4), w)) for m in misses})
    return Draft(rng.choice(GREP_FILES), f"grep -rl {w} {d}",
                 [{"type": "output", "text": "\n".join(hits), "match": "lines"}] + unchanged(files), {"d": d, "w": w},
                 files=files)


def t_xargs_lines(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, rng.choice((1, 2)))
    ext = rng.choice(EXTENSIONS)
    hits, files = _files_under(p, rng, d, ext, rng.randint(2, 3))
    total = sum(files[h].count("\n") for h in hits)
    return Draft(rng.choice(XARGS_LINES), f"find {d} -name '*.{ext}' | xargs cat | wc -l",
                 [{"type": "output", "text": str(total), "match": "first_token"}] + unchanged(files),
                 {"d": d, "ext": ext}, files=files)


def t_replace_many(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, 1)
    ext = rng.choice(EXTENSIONS)
    w1, w2 = p.distinct(p.word, rng, 2)
    taken: set[str] = set()
    hits = tree(p, rng, d, rng.randint(2, 3), ext, taken)
    other = tree(p, rng, d, 1, _other_ext(rng, ext), taken)
    files = {x: text_of([line + f" {w1}" for line in _without(p, rng, 2, w1, w2)]) for x in hits + other}
    return Draft(rng.choice(REPLACE_MANY), f"find {d} -name '*.{ext}' | xargs sed -i 's/{w1}/{w2}/g'",
                 [{"type": "file", "path": h, "content": files[h].replace(w1, w2)} for h in hits]
                 + unchanged(files, *hits), {"d": d, "ext": ext, "w1": w1, "w2": w2}, files=files)


def t_rename_ext(p: Pools, rng: random.Random) -> Draft:
    d = dir_path(p, rng, 1)
    e1, e2 = rng.sample(EXTENSIONS, 2)
    names: set[str] = set()
    stems = p.distinct(p.stem, rng, rng.randint(2, 3))
    files = {f"{d}/{s}.{e1}": text_of(p.lines(rng, 2)) for s in stems}
    files[f"{d}/{p.stem(rng)}.{_other_ext(rng, e1)}"] = text_of(p.lines(rng, 1))
    names.update(files)
    moved = [f"{d}/{s}.{e1}" for s in stems]
    return Draft(rng.choice(RENAME_EXT), f'for f in {d}/*.{e1}; do mv "$f" "${{f%.{e1}}}.{e2}"; done',
                 [{"type": "file", "path": m[: -len(e1)] + e2, "content": files[m]} for m in moved]
                 + [{"type": "absent", "path": m} for m in moved] + unchanged(files, *moved),
                 {"d": d, "e1": e1, "e2": e2}, files=files)


# ------------------------------------------------------------------ sort / uniq / cut / awk / sed

def _table(p: Pools, rng: random.Random, numeric: int | None = None) -> tuple[list[str], list[list[str]]]:
    """A CSV header of 3-4 distinct column names and 3-6 rows; column `numeric` holds integers."""
    header = p.distinct(p.real, rng, rng.randint(3, 4))
    rows = [[str(rng.randint(1, 99)) if c == numeric else p.word(rng) for c in range(len(header))]
            for _ in range(rng.randint(3, 6))]
    return header, rows


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return text_of([",".join(header)] + [",".join(r) for r in rows])


def t_cut_column(p: Pools, rng: random.Random) -> Draft:
    header, rows = _table(p, rng)
    k = rng.randrange(len(header))
    f = file_name(p, rng, ext="csv")
    files = distractors(p, rng, {f: _csv(header, rows)}, 1)
    return Draft(rng.choice(CUT_COLUMN), f"cut -d, -f{k + 1} {f}",
                 [{"type": "output", "text": "\n".join([header[k]] + [r[k] for r in rows])}] + unchanged(files),
                 {"f": f, "col": header[k]}, files=files, before=(f"head -n 1 {f}",))


def t_awk_sum(p: Pools, rng: random.Random) -> Draft:
    k = rng.randrange(3)
    header, rows = _table(p, rng, numeric=k)
    f = file_name(p, rng, ext="csv")
    files = distractors(p, rng, {f: _csv(header, rows)}, 1)
    total = sum(int(r[k]) for r in rows)
    return Draft(rng.choice(AWK_SUM), f"awk -F, 'NR > 1 {{ s += ${k + 1} }} END {{ print s }}' {f}",
                 [{"type": "output", "text": str(total), "match": "first_token"}] + unchanged(files),
                 {"f": f, "col": header[k]}, files=files, before=(f"head -n 1 {f}",))


def t_distinct(p: Pools, rng: random.Random) -> Draft:
    values = p.distinct(p.word, rng, rng.randint(2, 6))
    lines = values + [rng.choice(values) for _ in range(rng.randint(2, 6))]
    rng.shuffle(lines)
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(lines)}, 1)
    return Draft(rng.choice(DISTINCT), f"sort -u {f} | wc -l",
                 [{"type": "output", "text": str(len(values)), "match": "first_token"}] + unchanged(files), {"f": f},
                 files=files)


def t_top_line(p: Pools, rng: random.Random) -> Draft:
    values = p.distinct(p.word, rng, rng.randint(3, 5))
    counts = rng.sample(range(1, 5), len(values) - 1)
    top = max(counts) + rng.randint(1, 2)
    lines = [v for v, c in zip(values, [top] + counts) for _ in range(c)]
    rng.shuffle(lines)
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(lines)}, 1)
    return Draft(rng.choice(TOP_LINE), f"sort {f} | uniq -c | sort -rn | head -n 1",
                 [{"type": "output", "text": values[0], "match": "last_token"}] + unchanged(files), {"f": f},
                 files=files)


def t_sort_numeric(p: Pools, rng: random.Random) -> Draft:
    nums = rng.sample(range(1, 1000), rng.randint(4, 8))
    while sorted(nums) == sorted(nums, key=str):  # a plain `sort` must get it wrong
        nums = rng.sample(range(1, 1000), len(nums))
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of([str(n) for n in nums])}, 1)
    g = file_name(p, rng, set(files))
    return Draft(rng.choice(SORT_NUMERIC), f"sort -n {f} > {g}",
                 [{"type": "file", "path": g, "content": text_of([str(n) for n in sorted(nums)])}] + unchanged(files),
                 {"f": f, "g": g}, files=files)


def t_dedupe(p: Pools, rng: random.Random) -> Draft:
    values = p.distinct(p.word, rng, rng.randint(3, 5))
    lines = values + [rng.choice(values) for _ in range(rng.randint(2, 4))]
    rng.shuffle(lines)
    while lines == sorted(lines):
        rng.shuffle(lines)
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(lines)}, 1)
    g = file_name(p, rng, set(files))
    first = list(dict.fromkeys(lines))
    return Draft(rng.choice(DEDUPE), f"awk '!seen[$0]++' {f} > {g}",
                 [{"type": "file", "path": g, "content": text_of(first)}] + unchanged(files), {"f": f, "g": g},
                 files=files)


def t_sed_delete(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    lines = _without(p, rng, rng.randint(3, 6), w)
    for i in rng.sample(range(len(lines)), rng.randint(1, len(lines) - 1)):
        lines[i] = f"{lines[i]} {w}"
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(lines)})
    return Draft(rng.choice(SED_DELETE), f"sed -i '/{w}/d' {f}",
                 [{"type": "file", "path": f, "content": text_of([x for x in lines if w not in x])}]
                 + unchanged(files, f), {"f": f, "w": w}, files=files)


def t_head_save(p: Pools, rng: random.Random) -> Draft:
    n = p.number(rng, 2, 9)
    f = file_name(p, rng)
    lines = p.lines(rng, n + rng.randint(2, 5))
    files = distractors(p, rng, {f: text_of(lines)}, 1)
    g = file_name(p, rng, set(files))
    return Draft(rng.choice(HEAD_SAVE), f"head -n {n} {f} > {g}",
                 [{"type": "file", "path": g, "content": text_of(lines[:n])}] + unchanged(files),
                 {"f": f, "g": g, "n": str(n)}, files=files)


# ------------------------------------------------------------------ archives

def t_tar_extract(p: Pools, rng: random.Random) -> Draft:
    src, d, a = p.distinct(p.stem, rng, 3)
    members = tree(p, rng, src, rng.randint(1, 3))
    content = {m: text_of(p.lines(rng, 2)) for m in members}
    files = distractors(p, rng, content, 1)
    return Draft(rng.choice(TAR_EXTRACT), f"mkdir -p {d} && tar xzf {a}.tar.gz -C {d}",
                 [{"type": "file", "path": f"{d}/{m}", "content": content[m]} for m in members]
                 + [{"type": "exists", "path": f"{a}.tar.gz"}] + unchanged(files, *members), {"a": a, "d": d},
                 files=files, setup=[f"tar czf {a}.tar.gz {src} && rm -r {src}"])


def t_tar_list(p: Pools, rng: random.Random) -> Draft:
    a = p.stem(rng)
    members = tree(p, rng, p.stem(rng), rng.randint(1, 6))
    files = distractors(p, rng, {m: text_of(p.lines(rng, 1)) for m in members}, 1)
    return Draft(rng.choice(TAR_LIST), f"tar tzf {a}.tar.gz | wc -l",
                 [{"type": "output", "text": str(len(members)), "match": "first_token"}] + unchanged(files, *members),
                 {"a": a}, files=files, setup=[f"tar czf {a}.tar.gz {' '.join(members)} && rm {' '.join(members)}"])


def t_tar_select(p: Pools, rng: random.Random) -> Draft:
    d, a = p.distinct(p.stem, rng, 2)
    ext = rng.choice(EXTENSIONS)
    stems = p.distinct(p.stem, rng, rng.randint(3, 5))
    k = rng.randint(1, len(stems) - 1)
    hits = [f"{d}/{s}.{ext}" for s in stems[:k]]
    files = {h: text_of(p.lines(rng, 1)) for h in hits}
    files.update({f"{d}/{s}.{_other_ext(rng, ext)}": text_of(p.lines(rng, 1)) for s in stems[k:]})
    return Draft(rng.choice(TAR_SELECT), f"tar czf {a}.tar.gz {d}/*.{ext}",
                 [{"type": "tar", "path": f"{a}.tar.gz", "members": hits, "exact": True}] + unchanged(files),
                 {"d": d, "a": a, "ext": ext}, files=files)


# ------------------------------------------------------------------ permissions

def t_chmod_exec(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng, ext="sh")
    files = distractors(p, rng, {f: "#!/bin/sh\necho " + p.word(rng) + "\n"})
    others = [k for k in files if k != f]
    return Draft(rng.choice(CHMOD_EXEC), f"chmod +x {f}",
                 [sh(f"test -x {f}")] + [sh(f"test ! -x {o}") for o in others] + unchanged(files), {"f": f},
                 files=files)


def t_chmod_private(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(p.lines(rng, 2))})
    return Draft(rng.choice(CHMOD_PRIVATE), f"chmod 600 {f}",
                 [cmd(["stat", "-c", "%a", f], "600")] + unchanged(files), {"f": f}, files=files)


# ------------------------------------------------------------------ text statistics

def t_word_count(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    lines = p.lines(rng, rng.randint(2, 6))
    files = distractors(p, rng, {f: text_of(lines)})
    return Draft(rng.choice(WORD_COUNT), f"wc -w < {f}",
                 [{"type": "output", "text": str(sum(len(x.split()) for x in lines)), "match": "first_token"}]
                 + unchanged(files), {"f": f}, files=files)


def t_char_count(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(p.lines(rng, rng.randint(1, 4)))})
    return Draft(rng.choice(CHAR_COUNT), f"wc -c < {f}",
                 [{"type": "output", "text": str(len(files[f].encode())), "match": "first_token"}] + unchanged(files),
                 {"f": f}, files=files)


def t_longest_line(p: Pools, rng: random.Random) -> Draft:
    f = file_name(p, rng)
    lines = p.lines(rng, rng.randint(3, 6))
    while sorted(len(x) for x in lines)[-2:][0] == max(len(x) for x in lines):  # one longest line
        lines = p.lines(rng, len(lines))
    files = distractors(p, rng, {f: text_of(lines)}, 1)
    return Draft(rng.choice(LONGEST_LINE), f"awk '{{ print length, $0 }}' {f} | sort -rn | head -n 1 | cut -d' ' -f2-",
                 [{"type": "output", "text": max(lines, key=len)}] + unchanged(files), {"f": f}, files=files)


# ------------------------------------------------------------------ quoting, appending

def t_quote_line(p: Pools, rng: random.Random) -> Draft:
    w1, w2 = p.distinct(p.word, rng, 2)
    f = file_name(p, rng, ext="txt")
    files = distractors(p, rng, {})
    line = f'{w1} said "{w2}"'
    return Draft(rng.choice(QUOTE_LINE), f"echo '{line}' > {f}",
                 [{"type": "file", "path": f, "content": line + "\n"}] + unchanged(files), {"f": f, "w1": w1, "w2": w2},
                 files=files)


def t_append(p: Pools, rng: random.Random) -> Draft:
    w = p.word(rng)
    f = file_name(p, rng)
    files = distractors(p, rng, {f: text_of(p.lines(rng, rng.randint(1, 3)))})
    return Draft(rng.choice(APPEND), f"echo {w} >> {f}",
                 [{"type": "file", "path": f, "content": files[f] + w + "\n"}] + unchanged(files, f), {"f": f, "w": w},
                 files=files)


# ------------------------------------------------------------------ multi-step: read the error, then act

def t_missing_dir(p: Pools, rng: random.Random) -> Draft:
    """The directory does not exist: the first write fails with "No such file or directory"."""
    w = p.word(rng)
    d = dir_path(p, rng, rng.choice((1, 2)))
    f = file_name(p, rng)
    files = distractors(p, rng, {})
    return Draft(rng.choice(MISSING_DIR), f"mkdir -p {d} && echo {w} > {d}/{f}",
                 [{"type": "file", "path": f"{d}/{f}", "content": w + "\n", "strip": True}] + unchanged(files),
                 {"w": w, "d": d, "f": f}, files=files, before=(f"echo {w} > {d}/{f}",))


def t_locate_count(p: Pools, rng: random.Random) -> Draft:
    """The file is not where the instruction suggests: the count fails, `find` shows where it is."""
    f = file_name(p, rng)
    where = f"{dir_path(p, rng, rng.choice((1, 2, 3)))}/{f}"
    n = rng.randint(2, 12)
    files = distractors(p, rng, {where: text_of(p.lines(rng, n))})
    return Draft(rng.choice(LOCATE_COUNT), f"wc -l < {where}",
                 [{"type": "output", "text": str(n), "match": "first_token"}] + unchanged(files), {"f": f},
                 files=files, before=(f"wc -l < {f}", f"find . -name {f}"))


def t_locate_move(p: Pools, rng: random.Random) -> Draft:
    """Move a file that lives somewhere below: the first mv fails, `find` shows the path."""
    f = file_name(p, rng)
    where = f"{dir_path(p, rng, rng.choice((1, 2)))}/{f}"
    d = p.stem(rng)
    files = distractors(p, rng, {where: text_of(p.lines(rng, 2))})
    return Draft(rng.choice(LOCATE_MOVE), f"mkdir -p {d} && mv {where} {d}/",
                 [{"type": "file", "path": f"{d}/{f}", "content": files[where]}, {"type": "absent", "path": where}]
                 + unchanged(files, where), {"f": f, "d": d}, files=files,
                 before=(f"mkdir -p {d} && mv {f} {d}/", f"find . -name {f}"))


FIND_DELETE = ["Delete every .{ext} file under {d}, and nothing else.", "Remove all the .{ext} files below {d}.",
               "Clean out the .{ext} files anywhere inside {d}; leave other files alone.",
               "Get rid of each file ending in .{ext} in {d} and its subfolders.",
               "Under {d}, erase the files whose names end with .{ext}.",
               "Purge {d} of .{ext} files, including nested ones."]
FIND_COUNT = ["How many .{ext} files are there under {d}?", "Count the .{ext} files anywhere inside {d}.",
              "Report the number of files ending in .{ext} below {d}.",
              "Tell me how many .{ext} files {d} holds, subfolders included.",
              "What is the count of .{ext} files in the tree {d}?"]
EMPTY_DELETE = ["Delete the empty files in {d}, keep the rest.", "Remove every empty file found under {d}.",
                "Under {d}, get rid of the files that have no content.",
                "Clean up {d}: erase all zero-byte files in it and its subdirectories.",
                "Find the empty files below {d} and delete them."]
GREP_FILES = ["Which files under {d} mention {w}?", "List the files in {d} that contain {w}.",
              "Show the paths of files below {d} whose text includes {w}.",
              "Find every file inside {d} with the word {w} in it.",
              "Print the names of the files under {d} that contain {w}, one per line."]
XARGS_LINES = ["Count the lines of all .{ext} files under {d} together.",
               "How many lines do the .{ext} files in {d} have in total?",
               "Report the total line count over every .{ext} file below {d}.",
               "Add up the lines of each .{ext} file inside {d} and print the sum.",
               "What is the combined number of lines in {d}'s .{ext} files?"]
REPLACE_MANY = ["Replace {w1} with {w2} in every .{ext} file under {d}.",
                "In all the .{ext} files inside {d}, change {w1} to {w2}.",
                "Rewrite each .{ext} file of {d} so that {w1} becomes {w2}.",
                "Swap every occurrence of {w1} for {w2} across the .{ext} files in {d}.",
                "Edit the .{ext} files under {d}: {w1} should read {w2} everywhere."]
RENAME_EXT = ["Rename every .{e1} file in {d} to end in .{e2}.",
              "Change the extension of the .{e1} files in {d} to .{e2}.",
              "In {d}, turn each .{e1} file into a .{e2} file (same name, new extension).",
              "Give all the .{e1} files of {d} the extension .{e2} instead.",
              "Move each {d}/*.{e1} to the same name with .{e2}."]
CUT_COLUMN = ["Print the {col} column of the CSV file {f}, header included.",
              "Show the values of the column named {col} in {f} (with its header line).",
              "Extract the {col} column from {f} and print it, header first.",
              "Output column {col} of the comma-separated file {f}, including the header.",
              "From {f}, print just the {col} field of every line."]
AWK_SUM = ["What is the total of the {col} column in {f}?", "Add up the {col} values of the CSV file {f}.",
           "Print the sum of the numbers in the {col} column of {f}.",
           "Sum the column {col} of {f} (skip the header) and report it.",
           "Report the sum over all rows of {f}'s {col} field."]
DISTINCT = ["How many distinct lines does {f} have?", "Count the unique lines in {f}.",
            "Report the number of different lines in {f}, ignoring repeats.",
            "How many different values are listed in {f}, one per line?",
            "Print how many lines of {f} remain once duplicates are removed."]
TOP_LINE = ["Which line occurs most often in {f}?", "Find the most frequent line of {f}.",
            "What value appears the most times in {f}?", "Report the line repeated most in {f}.",
            "Print the entry of {f} that shows up more often than any other, with its count."]
SORT_NUMERIC = ["Sort the numbers in {f} from smallest to largest and save them to {g}.",
                "Write the lines of {f} in ascending numeric order into {g}.",
                "Put the numbers of {f} in order, lowest first, in a new file {g}.",
                "Create {g} with the values of {f} sorted numerically.",
                "Order {f} by value (as numbers, not text) and store the result as {g}."]
DEDUPE = ["Remove the repeated lines from {f}, keeping the first of each, and save the result as {g}.",
          "Write {f} without duplicate lines to {g}, in the original order.",
          "Create {g}: the lines of {f} with every repeat dropped, first occurrences kept in place.",
          "Save the unique lines of {f} to {g}, preserving their order.",
          "Copy {f} to {g} but leave out lines already seen earlier in the file."]
SED_DELETE = ["Delete every line that contains {w} from {f}.", "Remove the lines of {f} that mention {w}.",
              "Edit {f} in place so no line with {w} is left.", "Drop all lines containing {w} in {f}.",
              "Strip {f} of its lines that include {w}."]
HEAD_SAVE = ["Save the first {n} lines of {f} as {g}.", "Write the top {n} lines of {f} to a new file {g}.",
             "Create {g} holding the opening {n} lines of {f}.", "Copy just the first {n} lines of {f} into {g}.",
             "Put lines 1 to {n} of {f} in {g}."]
TAR_EXTRACT = ["Unpack {a}.tar.gz into a new directory {d}.", "Extract the archive {a}.tar.gz inside a folder {d}.",
               "Create {d} and unpack {a}.tar.gz there.", "Restore the contents of {a}.tar.gz under the directory {d}.",
               "Open up the tarball {a}.tar.gz into {d}, keeping the archive."]
TAR_LIST = ["How many files does the archive {a}.tar.gz hold?", "Count the entries of the tarball {a}.tar.gz.",
            "Report how many members {a}.tar.gz contains.",
            "Without unpacking it, tell how many files are in {a}.tar.gz.",
            "What is the number of files stored in {a}.tar.gz?"]
TAR_SELECT = ["Archive only the .{ext} files of {d} into {a}.tar.gz.",
              "Pack the .{ext} files in {d}, and no others, into {a}.tar.gz.",
              "Create {a}.tar.gz holding just the files of {d} that end in .{ext}.",
              "Make a gzipped tarball {a}.tar.gz of {d}'s .{ext} files only.",
              "Bundle the .{ext} files from {d} as {a}.tar.gz, leaving the other files out."]
CHMOD_EXEC = ["Make the script {f} executable.", "Give {f} execute permission.", "Allow {f} to be run as a program.",
              "Set the executable bit on {f}.", "Turn {f} into an executable file."]
CHMOD_PRIVATE = ["Make {f} readable and writable by its owner only.",
                 "Restrict {f} so that only the owner can read or write it.",
                 "Set the permissions of {f} to owner read/write, nothing for anyone else.",
                 "Lock down {f}: mode 600.", "Change {f}'s permissions so group and others have no access."]
WORD_COUNT = ["How many words are in {f}?", "Count the words of {f}.", "Report the number of words in {f}.",
              "Tell me the word count of {f}.", "What is the total number of words in the file {f}?"]
CHAR_COUNT = ["How many bytes does {f} contain?", "Report the size of {f} in bytes.",
              "Count the characters (bytes) in {f}, newlines included.", "What is the byte count of {f}?",
              "Print how many bytes long {f} is."]
LONGEST_LINE = ["Print the longest line of {f}.", "Which line of {f} is the longest?", "Show the longest line in {f}.",
                "Find the line with the most characters in {f} and print it.",
                "Output the single longest line from {f}."]
QUOTE_LINE = ['Write the line {w1} said "{w2}" (with the double quotes) into {f}.',
              'Create {f} containing exactly: {w1} said "{w2}"',
              'Put the text {w1} said "{w2}" into a new file {f}, quotes included.',
              'Save the sentence {w1} said "{w2}" as the only line of {f}.',
              'Make {f} hold one line: {w1} said "{w2}"']
APPEND = ["Append the line {w} to {f}.", "Add {w} as a new last line of {f}.", "Add a line {w} at the end of {f}.",
          "Extend {f} with one more line: {w}.", "Write {w} after the existing lines of {f}."]
MISSING_DIR = ["Save the word {w} into {d}/{f}.", "Write {w} to the file {d}/{f}.", "Store {w} in {d}/{f}.",
               "Put the word {w} in {d}/{f}, creating what is needed.", "Create {d}/{f} containing {w}."]
LOCATE_COUNT = ["Count the lines of the file named {f}.", "How many lines does {f} have? It is somewhere in this tree.",
                "Report the number of lines in {f} (find it first).", "Tell me how many lines the file {f} has.",
                "Print the line count of {f}, wherever it is."]
LOCATE_MOVE = ["Move the file {f} into a new directory {d}.", "Find {f} and put it in a new folder {d}.",
               "Create {d} and move the file named {f} into it.",
               "Relocate {f}, wherever it is, into a new directory {d}.",
               "Put {f} inside a new directory {d}; it is somewhere below."]

TEMPLATES = {
    "find_delete": t_find_delete, "grep_files": t_grep_files, "xargs_lines": t_xargs_lines,
    "replace_many": t_replace_many, "rename_ext": t_rename_ext, "cut_column": t_cut_column, "distinct": t_distinct,
    "top_line": t_top_line, "sort_numeric": t_sort_numeric, "dedupe": t_dedupe, "head_save": t_head_save,
    "tar_extract": t_tar_extract, "tar_select": t_tar_select, "chmod_exec": t_chmod_exec,
    "chmod_private": t_chmod_private, "word_count": t_word_count, "char_count": t_char_count,
    "longest_line": t_longest_line, "quote_line": t_quote_line, "append": t_append, "missing_dir": t_missing_dir,
    "locate_count": t_locate_count, "locate_move": t_locate_move,
    # held out (test_families only)
    "find_count": t_find_count, "tar_list": t_tar_list, "sed_delete": t_sed_delete, "awk_sum": t_awk_sum,
    "empty_delete": t_empty_delete,
}
HELD_OUT = ("find_count", "tar_list", "sed_delete", "awk_sum", "empty_delete")
PHRASINGS = [*FIND_DELETE, *FIND_COUNT, *EMPTY_DELETE, *GREP_FILES, *XARGS_LINES, *REPLACE_MANY, *RENAME_EXT,
             *CUT_COLUMN, *AWK_SUM, *DISTINCT, *TOP_LINE, *SORT_NUMERIC, *DEDUPE, *SED_DELETE, *HEAD_SAVE,
             *TAR_EXTRACT, *TAR_LIST, *TAR_SELECT, *CHMOD_EXEC, *CHMOD_PRIVATE, *WORD_COUNT, *CHAR_COUNT,
             *LONGEST_LINE, *QUOTE_LINE, *APPEND, *MISSING_DIR, *LOCATE_COUNT, *LOCATE_MOVE]
COMMAND_WORDS = ("find name delete type empty xargs cat wc grep rl sed awk NR END print length seen sort rn uniq "
                 "head tail cut tar xzf czf tzf chmod stat test echo mv mkdir for do done rm usr bin sh said")
