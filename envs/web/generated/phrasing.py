"""The instruction of a generated form: what to put where, in one of several phrasings, with its rules.

Train and test tasks use TRAIN_* phrasings; test_families tasks use HELD_OUT_* ones (and held-out layouts), so
that split measures reading an unseen wording as well. Rules a task may carry: "case" (a value to type in
capitals or in lower case), "date-format" (dates given in words, typed in the form's format; a native date
field takes the date as it is), "ordinal" (the n-th option of a radio group, or the n-th of several fields that
share a label), "popup" (which button answers a popup) and "confirm" (the dialog after the submit button).
"""
from __future__ import annotations

import random

TRAIN_OPENERS = ("Fill in the form: {items}. Then press {submit}.",
                 "In this form, {items}. Then click {submit}.",
                 "Complete the form: {items}; finish with the {submit} button.",
                 "{Items}. When done, click {submit}.")
HELD_OUT_OPENERS = ("Your task: {items}. Submit with {submit}.",
                    "Here is what the form needs: {items}. Use {submit} at the end.")
TRAIN_VALUE = ('{label}: "{v}"', 'type "{v}" into {label}', 'set {label} to "{v}"')
HELD_OUT_VALUE = ('"{v}" goes in {label}', 'write "{v}" as {label}')
TRAIN_CHOICE = ('{label}: "{v}"', 'choose "{v}" for {label}', 'pick "{v}" in {label}')
HELD_OUT_CHOICE = ('"{v}" as the {label}', 'make {label} "{v}"')
ORDINALS = ("first", "second", "third", "fourth", "fifth")
CASE = {"upper": " (in capitals)", "lower": " (in lower case)"}


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _quoted(options: list[str]) -> str:
    return _join([f'"{o}"' for o in options])


def item(rng: random.Random, w, held_out: bool) -> tuple[str, set[str]]:
    """How the instruction asks for one target widget, and the rules that uses."""
    value, choice = (HELD_OUT_VALUE, HELD_OUT_CHOICE) if held_out else (TRAIN_VALUE, TRAIN_CHOICE)
    label = f'the {ORDINALS[w.ordinal - 1]} "{w.label}" field' if w.ordinal else w.label
    rules = {"ordinal"} if w.ordinal else set()
    if w.kind in ("text", "password"):
        if w.rule in CASE:
            rules.add("case")
        return rng.choice(value).format(label=label, v=w.shown) + CASE.get(w.rule, ""), rules
    if w.kind == "date":
        if not w.native:
            rules.add("date-format")
        return rng.choice(value).format(label=label, v=w.shown), rules
    if w.kind == "select":
        return rng.choice(choice).format(label=label, v=w.shown), rules
    if w.kind == "radio":
        if w.rule == "nth":
            return f"choose the {ORDINALS[w.options.index(w.expected)]} option under {w.label}", rules | {"ordinal"}
        return rng.choice(choice + (f'select "{w.shown}" under {w.label}',)).format(label=label, v=w.shown), rules
    if w.kind == "checkbox":
        if not w.label:
            return f'tick "{w.expected[0]}"', rules
        if w.default or rng.random() < 0.5:
            return f"under {w.label}, tick only {_quoted(w.expected)}", rules
        return f"tick {_quoted(w.expected)} under {w.label}", rules
    # autocomplete: the name to look for; the field must end up holding the suggestion's full text
    return rng.choice((f'choose "{w.query}" in {label} (pick it from the suggestions)',
                       f'{label}: pick "{w.query}" from the list')), rules


def instruction(rng: random.Random, spec) -> tuple[str, list[str], str]:
    """(the instruction text, the rules it uses, the phrasing's id "train-<i>" or "held-<i>")."""
    held_out = spec.split == "test_families"
    openers = HELD_OUT_OPENERS if held_out else TRAIN_OPENERS
    k = rng.randrange(len(openers))
    targets = [w for w in spec.widgets if w.target]
    if rng.random() < 0.5:
        rng.shuffle(targets)  # the instruction's order need not be the page's
    rules: set[str] = set()
    items = []
    for w in targets:
        text, used = item(rng, w, held_out)
        items.append(text)
        rules |= used
    joined = _join(items)
    text = openers[k].format(items=joined, Items=joined[:1].upper() + joined[1:], submit=spec.submit)
    extra = []
    if "date-format" in rules:
        extra.append(f"Write dates as {spec.date_format}.")
    if spec.popup:
        rules.add("popup")
        p = spec.popup
        extra.append(rng.choice((f'Answer the {p["name"]} with "{p["answer"]}".',
                                 f'If a {p["name"]} appears, click "{p["answer"]}".')))
    if spec.confirm:
        rules.add("confirm")
        extra.append(f'Confirm with "{spec.confirm["yes"]}" when asked.')
    if any(not w.target for w in spec.widgets) and rng.random() < 0.5:
        extra.append("Leave everything else as it is.")
    return " ".join([text] + extra), sorted(rules), f"{'held' if held_out else 'train'}-{k}"
