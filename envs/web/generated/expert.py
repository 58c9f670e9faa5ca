"""Scripted policies of web_gen_env: an expert and a noisy expert.

The expert knows what the form should hold from the task's spec (the generator's own draw, found through the
ResetInfo's task_id) but finds every element the way a model must: in the observation's element list, by its
label (a field's label or placeholder, a select's label or first option, a box's text, a button's text). Each
turn it reads the page as it is now: it answers a popup, fixes every visible widget that does not hold its
expected state (typing, selecting, ticking; a distractor changed by mistake is put back), opens the tab or
section of a target it has not seen right yet, and presses the submit button (then the confirm dialog's yes)
once all hold. One turn does as much as the page allows: a click that reveals elements the observation has not
listed yet (a tab, a section, an autocomplete's suggestions after typing, the confirm dialog) is a turn's last
call, so a form takes 1-6 turns.

`NoisyGenExpert` makes one realistic mistake in about half the episodes, chosen by (seed, task_id): the value
typed into another field, a typo, a click on a wrong box or option (each repaired from the next page), or, for
the "noisy" kind only, pressing submit before the form is complete (the page judges it a failure, as a real
form would). `notes()` names the mistake.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from envs.core.contract import ResetInfo
from envs.core.policies import RandomPolicy, _typo
from envs.core.suites import find_task
from envs.web.experts import El, click, draw_mistake, parse_elements, type_
from envs.web.generated.env import spec_of
from envs.web.generated.spec import FormSpec, Widget
from transcript.toolcalls import format_tool_call


def norm(text: str) -> str:
    """A label as a person compares it: no "*" or ":" after it, any case."""
    return re.sub(r"[\s:*]+$", "", text or "").strip().lower()


def _button(els: list[El], text: str, tags=("button",)) -> El | None:
    return next((e for e in els if e.tag in tags and e.text.strip() == text), None)


def find(els: list[El], w: Widget, layout: str) -> list[El]:
    """The elements of a widget on the page now ([] when it is hidden): a field, or a group's boxes."""
    if w.kind in ("radio", "checkbox"):
        return [e for e in els if e.tag == "input" and e.type == w.kind and e.label.strip() in w.options]
    if w.kind == "select":
        if layout == "placeholder":
            return [e for e in els if e.tag == "select" and e.options[:1] == [w.placeholder_option]][:1]
        return [e for e in els if e.tag == "select" and norm(e.label) == norm(w.label)][:1]
    want = norm(w.label)
    hits = [e for e in els if e.text_field and want in (norm(e.label), norm(e.placeholder),
                                                        norm(re.sub(r" \(.*\)$", "", e.placeholder)))]
    i = max(w.ordinal - 1, 0)
    return hits[i:i + 1]


def _date_keys(iso: str) -> str:
    """What a person types into a native date field (Chromium's en-US order: month, day, year)."""
    y, m, d = iso.split("-")
    return f"{m}/{d}/{y}"


def fixes(els: list[El], w: Widget, found: list[El]) -> list[dict]:
    """The calls that give a visible widget its expected state ([] when it holds it)."""
    if w.kind == "checkbox":
        return [click(e) for e in found if e.checked != (e.label.strip() in w.expected)]
    if w.kind == "radio":
        hit = next((e for e in found if e.label.strip() == w.expected), None)
        return [click(hit)] if hit is not None and not hit.checked else []
    el = found[0]
    if w.kind == "select":
        want = w.expected or w.placeholder_option
        return [] if (el.value or "") == want else [{"name": "select", "arguments": {"ref": el.ref, "option": want}}]
    if (el.value or "").strip() == w.expected:
        return []
    if w.kind == "autocomplete":
        item = next((e for e in els if e.tag == "li" and e.text == w.expected), None)
        return [click(item)] if item is not None else [type_(el, w.query)]
    return [type_(el, _date_keys(w.expected) if w.native and w.expected else w.expected)]


@dataclass
class GenExpert:
    """The web_gen_env expert (see the module docstring)."""

    env_name: str = "web_gen_env"
    seed: int = 0
    kind: str = "expert"
    spec: FormSpec | None = None
    ok: set = field(default_factory=set)  # ids of widgets seen right or set right (a tab's, once it is left)
    answered: bool = False
    submitted: bool = False

    def reset(self, info: ResetInfo) -> None:
        self.spec = spec_of(find_task(info["env"], info["task_id"]))
        self.ok, self.answered, self.submitted = set(), False, False

    def plan(self, els: list[El]) -> list[dict]:
        """This turn's calls: the next steps of the expert's procedure on the page as it is now. A click that shows
        elements the page has not listed yet (a tab, a section, a suggestion list, the confirm dialog) ends the
        turn; one that only takes something away (a popup's answer, a picked suggestion) does not."""
        s, out = self.spec, []
        if s.confirm and self.submitted:
            b = _button(els, s.confirm["yes"])
            if b is not None:
                return [click(b)]
        # a popup on the page is answered (again, if a click before did not reach it); popup buttons share no text
        # with the form's own (spec._extras)
        popup = _button(els, s.popup["answer"]) if s.popup else None
        if popup is not None:
            self.answered = True
            out.append(click(popup))
            els = [e for e in els if e.tag != "li"]  # the click moves the focus: an open suggestion list closes
        # a popup still to come (at the first edit) covers the page: until then, only typing and selecting
        waiting = bool(s.popup) and not self.answered
        typing, held = None, False
        # a suggestion is picked before anything else moves the focus away from its field (which closes the list)
        for w in sorted(s.widgets, key=lambda w: w.kind != "autocomplete"):
            found = find(els, w, s.layout)
            if not found:
                continue
            calls = fixes(els, w, found)
            self.ok.add(w.id)  # what this turn does is taken as done: the next page shows any slip
            if not calls:
                continue
            if calls[0]["name"] == "type" and w.kind == "autocomplete":
                typing = typing or calls[0]  # its list would cover the page: the turn's last call
            elif waiting and calls[0]["name"] == "click" and (out or held):
                held = True
                self.ok.discard(w.id)
            else:
                out.extend(calls)
        if typing is not None:
            return out + [typing]
        if held or (waiting and out):
            return out
        for w in s.widgets:
            if w.target and w.id not in self.ok:
                opener = (_button(els, s.tabs[int(w.container[4:])]) if w.container.startswith("tab:")
                          else _button(els, s.section, ("h3",)) if w.container == "section" else None)
                if opener is not None:
                    return out + [click(opener)]
        return out + self.submit(els)

    def submit(self, els: list[El]) -> list[dict]:
        b = _button(els, self.spec.submit)
        if b is None:
            return [{"name": "submit", "arguments": {}}]
        self.submitted = True
        return [click(b)]

    def act(self, observation: str, history: list[dict]) -> str:
        if self.spec is None:
            raise RuntimeError("call policy.reset(info) before act()")
        calls = self.plan(parse_elements(observation))
        return "\n".join(format_tool_call(c["name"], c["arguments"]) for c in calls)

    def notes(self) -> dict:
        return {"policy": self.kind}


@dataclass
class NoisyGenExpert(GenExpert):
    """The expert with one mistake in about half the episodes (see the module docstring)."""

    kind: str = "noisy"
    p_correct: float = 0.45
    mistake: str = "none"
    _plan: str = ""
    _rng: random.Random = field(default_factory=random.Random)

    def reset(self, info: ResetInfo) -> None:
        super().reset(info)
        self.mistake = "none"
        self._rng, self._plan = draw_mistake(self.seed, info["task_id"], self.kind, self.p_correct)

    def plan(self, els: list[El]) -> list[dict]:
        calls = super().plan(els)
        if not self._plan or self.mistake != "none":
            return calls
        for i, call in enumerate(calls):
            wrong = self._wrong(els, call, i)
            if wrong is not None:
                self.mistake = self._plan
                return calls[:i] + [wrong]  # the turn ends with the mistake: the next page shows it
        return calls

    def _wrong(self, els: list[El], call: dict, i: int) -> dict | None:
        rng, plan = self._rng, self._plan
        ref = call["arguments"].get("ref")
        el = next((e for e in els if e.ref == ref), None)
        if el is None or call["name"] == "submit":
            return None
        typing = call["name"] == "type" and el.type in ("text", "password")
        if plan == "typo" and typing and len(call["arguments"]["text"]) >= 2:
            return type_(el, _typo(rng, call["arguments"]["text"]))
        if plan == "wrong field" and typing:
            auto = {w.label for w in self.spec.widgets if w.kind == "autocomplete"}
            others = [e for e in els if e.tag == "input" and e.type in ("text", "password") and e.ref != ref
                      and e.label not in auto]
            return type_(rng.choice(others), call["arguments"]["text"]) if others else None
        fills = call["name"] in ("type", "select") or (call["name"] == "click" and el.type in ("checkbox", "radio"))
        if plan == "wrong click" and fills:  # instead of a fill, never of a popup's, tab's or dialog's click
            boxes = [e for e in els if e.tag == "input" and e.ref != ref and (
                e.type == "checkbox" or (e.type == "radio" and self._target_radio(e)))]
            return click(rng.choice(boxes)) if boxes else None
        # after a first fill, and not while a popup is to come (it would cover the button: no mistake at all)
        popup_to_come = bool(self.spec.popup) and not self.answered
        if plan == "early submit" and i > 0 and call["name"] in ("type", "select") and not popup_to_come:
            b = _button(els, self.spec.submit)
            if b is not None:
                self.submitted = True
                return click(b)
        return None

    def _target_radio(self, e: El) -> bool:
        """A radio of a group the instruction names (its choice can be put right; a distractor group's cannot)."""
        return any(w.kind == "radio" and w.target and e.label.strip() in w.options and not e.checked
                   for w in self.spec.widgets)

    def notes(self) -> dict:
        return {"policy": self.kind, "mistake": self.mistake}


def make_gen_policy(kind: str, seed: int = 0):
    """expert | noisy | recover (only repaired mistakes) | random, for web_gen_env."""
    if kind == "expert":
        return GenExpert(seed=seed)
    if kind in ("noisy", "recover"):
        return NoisyGenExpert(seed=seed, kind=kind, p_correct=0.45 if kind == "noisy" else 0.5)
    if kind == "random":
        return RandomPolicy("web_gen_env", seed)
    raise ValueError(f"unknown policy {kind!r}; policies: expert, noisy, recover, random")
