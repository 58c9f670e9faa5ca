"""FormSpec: one generated form task, drawn from a seed, pure Python (no browser), JSON-able.

`draw(seed, split, layout=None)` is deterministic: the same (seed, split, layout) gives the same spec, and the
page (form.js) builds the same DOM from it, with no randomness of its own. A spec holds

- `widgets`, in page (DOM) order: kind (text, password, date, select, radio, checkbox, autocomplete), the label
  the page shows, options, the initial state (`default`) and the state a correct submit holds (`expected`),
  whether the instruction names it (`target`; the others are distractors that must keep their initial state),
  its container ("" the form, "tab:<i>" a tab panel, "section" a collapsed section), and rule data (a native
  date input, a format hint, a select's placeholder option, an autocomplete query, the position among fields
  sharing one label);
- the layout (LAYOUTS for train and test, HELD_OUT_LAYOUTS for test_families), the tabs or collapsible section,
  a popup (shown at the start or at the first edit; the instruction says which button answers it) and a
  confirm dialog after the submit button, the submit button's text and the distractor buttons, links and notes;
- the instruction (phrasing.py) and the rules it uses (`rules`: case, date-format, ordinal, popup, confirm).

The expected final state is `{key(w): w.expected for w in widgets}` plus the popup's answer; `fields()` gives
the targets whose value shows as a field's value (text kinds and selects), what partial credit counts.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from envs.core.tasks import FAMILY_SPLIT, SPLITS
from envs.web.generated import phrasing, vocab

LAYOUTS = ("column-above", "column-left", "columns-above", "columns-left")
HELD_OUT_LAYOUTS = ("table", "placeholder")
KINDS = ("text", "password", "date", "select", "radio", "checkbox", "autocomplete")
KIND_WEIGHTS = (30, 8, 12, 15, 12, 13, 10)
TEXT_KINDS = ("text", "password", "date", "autocomplete")
TABLES = {"text": vocab.TEXT, "password": vocab.PASSWORD, "date": vocab.DATE, "select": vocab.SELECT,
          "radio": vocab.RADIO, "checkbox": vocab.CHECKBOX, "autocomplete": vocab.AUTOCOMPLETE}
SELECT_PLACEHOLDERS = ("Choose...", "Select one", "-- pick --")


@dataclass
class Widget:
    id: str
    kind: str
    label: str  # a field's label; a radio or checkbox group's caption ("" for a single checkbox)
    options: list[str] = field(default_factory=list)  # select, radio, checkbox options; autocomplete suggestions
    default: Any = ""  # the initial state: a value, an option's text ("" none), a list of ticked options
    expected: Any = ""  # the state a correct submit holds (targets: what the instruction asks; others: default)
    target: bool = False
    container: str = ""  # "" | "tab:<i>" | "section"
    required: bool = False  # shows a "*" after the label
    native: bool = False  # a date as <input type=date>: its value reads YYYY-MM-DD
    hint: str = ""  # a placeholder hint (a date's format)
    placeholder_option: str = ""  # a select's first option that is no choice
    query: str = ""  # autocomplete: the name the instruction gives
    ordinal: int = 0  # 1-based position among fields that share this label; 0 when the label is unique
    shown: str = ""  # the value as the instruction states it (a date in words, a value before its case rule)
    rule: str = ""  # "", "upper", "lower", "nth" (radio: the n-th option)
    concept: str = ""  # the vocabulary entry it came from (vocab.py)


@dataclass
class FormSpec:
    seed: int
    split: str
    layout: str
    title: str
    widgets: list[Widget]
    submit: str
    buttons: list[list[str]]  # [text, behaviour] in page order, the submit button among them ("submit")
    links: list[str]
    notes: list[str]
    tabs: list[str] = field(default_factory=list)
    section: str = ""
    popup: dict | None = None  # {name, text, buttons, answer, appear: "start" | "input"}
    confirm: dict | None = None  # {text, yes, no}
    date_format: str = ""
    instruction: str = ""
    rules: list[str] = field(default_factory=list)
    phrasing: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def key(w: Widget) -> str:
        """A widget's name in the expected state: its label (a single box: its text), `#n` for shared labels."""
        name = w.label or (w.options[0] if w.options else w.id)
        return f"{name} #{w.ordinal}" if w.ordinal else name

    def fields(self) -> dict[str, str]:
        return {self.key(w): w.expected for w in self.widgets
                if w.target and (w.kind in TEXT_KINDS or w.kind == "select") and w.expected}


def _sample_ordered(rng: random.Random, pool: tuple, lo: int, hi: int) -> list[str]:
    """k options of a pool, in the pool's own order (months stay in calendar order)."""
    picked = sorted(rng.sample(range(len(pool)), rng.randint(lo, min(hi, len(pool)))))
    return [pool[i] for i in picked]


def _widget(rng: random.Random, kind: str, split: str, used: set, n: int, form: dict) -> Widget | None:
    """A widget of `kind` with a concept and label no other widget of the form has (None: none left)."""
    if kind == "checkbox" and rng.random() < 0.25:
        texts = [t for t in vocab.SINGLE_BOX[0 if split == "train" else 1] if t not in used]
        if not texts:
            return None
        text = rng.choice(texts)
        used.add(text)
        return Widget(f"w{n}", kind, "", [text], [], [text], concept="single")
    table = TABLES[kind]
    concepts = [c for c, e in table.items() if c not in used and vocab.labels_of(e, split)]
    if not concepts:
        return None
    concept = rng.choice(concepts)
    used.add(concept)
    entry = table[concept]
    label = rng.choice(vocab.labels_of(entry, split))
    w = Widget(f"w{n}", kind, label, required=rng.random() < 0.3, concept=concept)
    pools = form["pools"]
    if kind in ("text", "password"):
        w.shown = w.expected = entry[2](rng, pools)
        if kind == "text" and any(c.isalpha() for c in w.shown) and rng.random() < 0.25:
            w.rule = rng.choice(("upper", "lower"))
            w.expected = w.shown.upper() if w.rule == "upper" else w.shown.lower()
    elif kind == "date":
        y, m, d = vocab.date_value(rng, entry[2])
        w.native = rng.random() < 0.35
        fmt = form.setdefault("date_format", rng.choice(vocab.DATE_FORMATS))
        w.expected = f"{y:04d}-{m:02d}-{d:02d}" if w.native else (
            fmt.replace("DD", f"{d:02d}").replace("MM", f"{m:02d}").replace("YYYY", f"{y:04d}"))
        w.hint = fmt if not w.native and rng.random() < 0.5 else ""
        month = vocab.MONTHS[m - 1]
        w.shown = rng.choice((f"{d} {month} {y}", f"{month} {d}, {y}"))
    elif kind == "select":
        w.options = _sample_ordered(rng, entry[2], 3, 7)
        w.placeholder_option = rng.choice(SELECT_PLACEHOLDERS) if rng.random() < 0.5 else ""
        w.default = "" if w.placeholder_option else w.options[0]
        w.expected = w.shown = rng.choice([o for o in w.options if o != w.default])
    elif kind == "radio":
        w.options = _sample_ordered(rng, entry[2], 3, 5)
        w.default = w.options[0] if rng.random() < 0.3 else ""
        w.expected = w.shown = rng.choice([o for o in w.options if o != w.default])
        if rng.random() < 0.3:
            w.rule = "nth"
    elif kind == "checkbox":
        w.options = _sample_ordered(rng, entry[2], 3, 6)
        w.default = [rng.choice(w.options)] if rng.random() < 0.3 else []
        while True:
            want = set(rng.sample(w.options, rng.randint(1, min(3, len(w.options) - 1))))
            if want != set(w.default):
                break
        w.expected = [o for o in w.options if o in want]
    else:  # autocomplete
        w.options = [full for _, full in entry[2]]
        w.query, w.expected = rng.choice(entry[2])
        w.shown = w.query
    return w


def _distractor(w: Widget) -> Widget:
    """A widget the instruction does not name: it must keep its initial state."""
    w.target, w.rule = False, ""
    w.expected = list(w.default) if isinstance(w.default, list) else w.default
    return w


def draw(seed: int, split: str = "train", layout: str | None = None) -> FormSpec:
    """The form task of `seed` in `split` (see the module docstring); `layout` fixes the layout."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    if layout is not None and layout not in LAYOUTS + HELD_OUT_LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS + HELD_OUT_LAYOUTS)}")
    rng = random.Random(seed)
    layout = layout or rng.choice(HELD_OUT_LAYOUTS if split == FAMILY_SPLIT else LAYOUTS)
    form: dict = {"pools": vocab.pools(split)}
    used: set = set()
    units: list[list[Widget]] = []  # widgets that stay together (a label shared by two adjacent fields)
    n = 0
    for _ in range(rng.randint(2, 5)):
        w = _widget(rng, rng.choices(KINDS, KIND_WEIGHTS)[0], split, used, n, form)
        if w is not None:
            w.target = True
            units.append([w])
            n += 1
    texts = [u[0] for u in units if u[0].kind == "text" and not u[0].rule]
    if texts and rng.random() < 0.2:  # "the second Phone field": the same label twice, told apart by position
        first = rng.choice(texts)
        twin = Widget(f"w{n}", "text", first.label, required=first.required, concept=first.concept)
        n += 1
        twin.expected = twin.shown = vocab.TEXT[first.concept][2](rng, form["pools"])
        twin.target = rng.random() < 0.6
        if not twin.target:
            _distractor(twin)
        next(u for u in units if u[0] is first).append(twin)
    for _ in range(rng.choice((0, 1, 1, 2))):
        w = _widget(rng, rng.choice(("text", "text", "select", "checkbox", "radio", "date")), split, used, n, form)
        if w is not None:
            units.append([_distractor(w)])
            n += 1
    if texts and rng.random() < 0.25:  # "Previous city" next to "City": read the whole label
        base = rng.choice(texts)
        label = f"{rng.choice(vocab.SIMILAR_PREFIXES)} {base.label.lower()}"
        units.append([_distractor(Widget(f"w{n}", "text", label))])
        n += 1
    rng.shuffle(units)
    spec = FormSpec(seed=seed, split=split, layout=layout, title=rng.choice(vocab.TITLES), widgets=[], submit="",
                    buttons=[], links=[], notes=[], date_format=form.get("date_format", ""))
    _containers(rng, spec, units)
    _extras(rng, spec)
    for label in {w.label for w in spec.widgets if w.kind == "text"}:
        same = [w for w in spec.widgets if w.kind == "text" and w.label == label]
        if len(same) > 1:
            for i, w in enumerate(same, 1):
                w.ordinal = i
    if layout == "placeholder":  # no labels on the page: a select names itself in its first option
        for w in spec.widgets:
            if w.kind == "select":
                w.placeholder_option, w.default = f"{w.label}...", ""
                if not w.target:
                    w.expected = ""
    spec.instruction, spec.rules, spec.phrasing = phrasing.instruction(rng, spec)
    return spec


def _containers(rng: random.Random, spec: FormSpec, units: list[list[Widget]]) -> None:
    """Tabs (every unit in one of 2-3 panels), a collapsed section (1-2 units, one with a target), or neither;
    spec.widgets in DOM order (panel by panel; the section after the form's own fields)."""
    mode = rng.choices(("none", "tabs", "section"), (45, 25, 30))[0]
    if mode == "tabs" and len(units) >= 2:
        spec.tabs = rng.sample(vocab.TABS, min(len(units), rng.choice((2, 2, 3))))
        order = list(range(len(units)))
        rng.shuffle(order)
        where = {u: (i if i < len(spec.tabs) else rng.randrange(len(spec.tabs))) for i, u in enumerate(order)}
        for i, u in enumerate(units):
            for w in u:
                w.container = f"tab:{where[i]}"
        units = sorted(units, key=lambda u: int(u[0].container[4:]))
    elif mode == "section" and len(units) >= 2:
        with_target = [i for i, u in enumerate(units) if any(w.target for w in u)]
        inside = {rng.choice(with_target)}
        if rng.random() < 0.4:
            inside.add(rng.randrange(len(units)))
        if len(inside) < len(units):
            spec.section = rng.choice(vocab.SECTIONS)
            for i in inside:
                for w in units[i]:
                    w.container = "section"
            units = [u for i, u in enumerate(units) if i not in inside] + [units[i] for i in sorted(inside)]
    spec.widgets = [w for u in units for w in u]


def _extras(rng: random.Random, spec: FormSpec) -> None:
    """The submit button, distractor buttons and links, notes, a popup and a confirm dialog."""
    taken = set(spec.tabs)
    if rng.random() < 0.3:
        name, text, buttons = rng.choice(vocab.POPUPS)
        edits = any(w.target for w in spec.widgets)
        spec.popup = {"name": name, "text": text, "buttons": list(buttons), "answer": rng.choice(buttons),
                      "appear": "input" if edits and rng.random() < 0.5 else "start"}
        taken.update(buttons)
    if rng.random() < 0.3:
        text, yes, no = rng.choice(vocab.CONFIRMS)
        spec.confirm = {"text": text, "yes": yes, "no": no}
        taken.update((yes, no))
    spec.submit = rng.choice([s for s in vocab.SUBMITS if s not in taken])
    others = [b for b in vocab.OTHER_BUTTONS if b[0] not in taken]
    spec.buttons = [list(b) for b in rng.sample(others, rng.choice((0, 1, 1, 2)))] + [[spec.submit, "submit"]]
    rng.shuffle(spec.buttons)
    spec.links = rng.sample(vocab.LINKS, rng.choice((0, 1, 2)))
    spec.notes = rng.sample(vocab.HELP_TEXTS, rng.choice((0, 1)))
