"""Scripted policies for web_form_env: an expert per task that reads only what a model reads, and a noisy one.

The expert sees the observation text (MiniWoB's instruction and the element list) and decides the next call
from the page as it is now: a field whose value is not the wanted one is typed, a checkbox in the wrong state
is clicked, and the page's submit button is pressed once everything holds. Because it looks at the page
every turn, it also recovers: a field filled wrong (by the noisy expert, or a popup that blocked typing) is
filled again. The task's fields come from MiniWoB's own extractor on the instruction (miniwob.fields).

`NoisyWebExpert` makes one realistic mistake in about half the episodes, chosen by (seed, task_id): typing a
field's value into another field, a typo in a value, a click on a wrong checkbox or option (the expert then
repairs each), or pressing submit before the last field (MiniWoB then ends the episode as a failure: no
recovery, as on a real form). `notes()` names the mistake. `RandomPolicy` of envs/core/policies.py works as is.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

from envs.core.contract import ResetInfo
from envs.core.policies import RandomPolicy, _typo
from transcript.toolcalls import format_tool_call

_LINE = re.compile(r"^\[(\d+)\] (\S+)(.*)$")
_TOKEN = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\[[^\]]*\])|("(?:[^"\\]|\\.)*")|(\S+)')


@dataclass
class El:
    ref: int
    tag: str
    type: str = ""
    text: str = ""
    label: str = ""
    placeholder: str = ""
    value: str | None = None
    options: list[str] = field(default_factory=list)
    checked: bool = False
    focused: bool = False

    @property
    def name(self) -> str:
        """What a person reads as the element's name: its text, else its label or placeholder."""
        return self.text or self.label or self.placeholder

    @property
    def text_field(self) -> bool:
        return (self.tag == "input" and self.type in ("text", "password", "email", "number", "search", "tel",
                                                        "url", "date", "time", "")) or self.tag == "textarea"


def parse_elements(observation: str) -> list[El]:
    """The element list of an observation (observe.element_line's format), the last page in it."""
    text = observation.rsplit("Page:\n", 1)[-1]
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        el = El(int(m.group(1)), m.group(2))
        first = True
        for key, kv, quoted, word in _TOKEN.findall(m.group(3)):
            if key:
                if kv.startswith("["):
                    el.options = kv[1:-1].split("|")
                else:
                    val = json.loads(kv)
                    if key == "selected":
                        el.value = val
                    elif key in ("label", "placeholder", "value"):
                        setattr(el, key, val)
            elif quoted:
                el.text = json.loads(quoted)
            elif word == "checked":
                el.checked = True
            elif word == "focused":
                el.focused = True
            elif first and el.tag == "input":
                el.type = word
            first = False
        out.append(el)
    return out


def _same(a: str, b: str) -> bool:
    a, b = a.strip().lower(), b.strip().lower()
    return a == b or (a.endswith("...") and b.startswith(a[:-3]))


def click(el: El) -> dict:
    return {"name": "click", "arguments": {"ref": el.ref}}


def type_(el: El, text: str) -> dict:
    return {"name": "type", "arguments": {"ref": el.ref, "text": text}}


def _button(els: list[El], *names: str) -> El | None:
    wanted = [n.lower() for n in names]
    for e in els:
        if e.tag in ("button", "a", "div", "span") or (e.tag == "input" and e.type in ("button", "submit")):
            if (e.text or e.value or "").strip().lower() in wanted:
                return e
    return None


def _submit(els: list[El]) -> dict | None:
    b = _button(els, "submit", "search", "go!", "go", "login", "log in", "ok")
    return click(b) if b else None


def _nth(n: str) -> int:
    return int(re.sub(r"\D", "", n) or 1) - 1


def _fill(els: list[El], pairs: list[tuple[El | None, str]]) -> dict | None:
    """The next type call of a list of (field, wanted value), or None when every field holds its value."""
    for el, want in pairs:
        if el is not None and (el.value or "") != want:
            return type_(el, want)
    return None


def _ticks(els: list[El], kind: str, targets: list[str]) -> dict | None:
    """The next click that makes the ticked boxes (or the chosen radio) exactly the targets."""
    for e in els:
        if e.tag == "input" and e.type == kind and e.checked != any(_same(e.label, t) for t in targets):
            return click(e)
    return None


# ------------------------------------------------------------------ one expert step per task
# Each: (fields, instruction, elements, memo) -> the next call (None: submit). memo persists in an episode.

def x_click_named(f, u, els, memo):
    target = f.get("target", "")
    if target.lower() == "x":
        target = "Close"
    for e in els:
        if e.tag not in ("input", "textarea", "select") and _same(e.text, target):
            return click(e)
    return None


def x_click_test(f, u, els, memo):
    b = next((e for e in els if e.tag == "button"), None)
    return click(b) if b else None


def x_button_sequence(f, u, els, memo):
    step = memo.setdefault("next", 0)
    memo["next"] += 1
    b = _button(els, ("ONE", "TWO")[min(step, 1)])
    return click(b) if b else None


def x_checkboxes(f, u, els, memo):
    targets = [v for k, v in f.items() if k.startswith("target")]
    return _ticks(els, "checkbox", targets) or _submit(els)


def x_option(f, u, els, memo):
    return _ticks(els, "radio", [f.get("target", "")]) or _submit(els)


def x_collapsible(f, u, els, memo):
    if not memo.get("opened"):
        memo["opened"] = True
        head = next((e for e in els if e.tag == "h3"), None)
        if head:
            return click(head)
    return _submit(els)


def x_dialog(f, u, els, memo):
    return x_click_named({"target": "x"}, u, els, memo)


def x_tab(f, u, els, memo):
    tab = next((e for e in els if e.tag == "a" and e.text == f"Tab #{f.get('target', '')}"), None)
    return click(tab) if tab else None


def x_tab_2(f, u, els, memo):
    target = f.get("target", "")
    hit = next((e for e in els if e.tag in ("span", "a") and not e.text.startswith("Tab #") and _same(e.text, target)),
               None)
    if hit:
        return click(hit)
    tabs = [e for e in els if e.tag == "a" and e.text.startswith("Tab #")]
    memo["tab"] = memo.get("tab", 0) + 1
    return click(tabs[memo["tab"] % len(tabs)]) if tabs else None


WIDGETS = {"button": lambda e: e.tag == "button" or (e.tag == "input" and e.type in ("button", "submit")),
           "text": lambda e: e.tag == "input" and e.type == "text",
           "textarea": lambda e: e.tag == "textarea",
           "checkbox": lambda e: e.tag == "input" and e.type == "checkbox",
           "radio": lambda e: e.tag == "input" and e.type == "radio"}


def x_widget(f, u, els, memo):
    match = WIDGETS.get(f.get("target", ""), lambda e: False)
    hit = next((e for e in els if match(e)), None)
    return click(hit) if hit else None


def _text_fields(els):
    return [e for e in els if e.text_field]


def x_password(f, u, els, memo):
    fields = [e for e in els if e.tag == "input" and e.type == "password"]
    return _fill(els, [(e, f.get("target", "")) for e in fields]) or _submit(els)


def x_enter_text(f, u, els, memo):
    fields = _text_fields(els)
    return _fill(els, [(fields[0] if fields else None, f.get("target", ""))]) or _submit(els)


def x_enter_text_2(f, u, els, memo):
    text = f.get("text", "")
    text = text.upper() if "upper" in f.get("case", "") else text.lower()
    fields = _text_fields(els)
    return _fill(els, [(fields[0] if fields else None, text)]) or _submit(els)


def x_focus(f, u, els, memo):
    fields = _text_fields(els)
    i = _nth(f["target"]) if f.get("target") else 0
    if memo.get("done") or i >= len(fields):
        return None
    memo["done"] = True
    return click(fields[i])


def x_login(f, u, els, memo):
    cancel = _button(els, "cancel")
    if cancel:  # a popup over the form: close it, do not leave the page
        return click(cancel)
    user = next((e for e in els if e.tag == "input" and e.type == "text"), None)
    pw = next((e for e in els if e.tag == "input" and e.type == "password"), None)
    return _fill(els, [(user, f.get("username", "")), (pw, f.get("password", ""))]) or _submit(els)


def x_choose_list(f, u, els, memo):
    sel = next((e for e in els if e.tag == "select"), None)
    if sel and not _same(sel.value or "", f.get("target", "")):
        return {"name": "select", "arguments": {"ref": sel.ref, "option": f.get("target", "")}}
    return _submit(els)


def x_autocomplete(f, u, els, memo):
    start, end = f.get("start", ""), f.get("end", "")
    box = next(iter(_text_fields(els)), None)
    if box is None:
        return None

    def fits(text: str) -> bool:
        return text.lower().startswith(start.lower()) and text.lower().endswith(end.lower())

    value = box.value or ""
    items = [e for e in els if e.tag in ("li", "div", "a") and e.ref != box.ref and e.text and fits(e.text)]
    if fits(value) and (len(value) > len(start) or not items or any(i.text.lower() == value.lower() for i in items)):
        if items and not memo.get("escaped"):  # the open list covers the submit button: close it first
            memo["escaped"] = True
            return {"name": "press", "arguments": {"key": "Escape"}}
        return _submit(els)
    if items:
        return click(items[0])
    return type_(box, start)


def x_form_sequence_2(f, u, els, memo):
    radios = [e for e in els if e.tag == "input" and e.type == "radio"]
    texts = _text_fields(els)
    r, t = _nth(f.get("radio target", "1")), _nth(f.get("textbox target", "1"))
    if r < len(radios) and not radios[r].checked:
        return click(radios[r])
    got = _fill(els, [(texts[t] if t < len(texts) else None, f.get("textbox text", ""))])
    return got or _submit(els)


def x_date(f, u, els, memo):
    box = next((e for e in els if e.tag == "input" and e.type == "date"), None)
    m, d, y = (f.get("target", "") + "//").split("/")[:3]
    want = f"{y}-{m}-{d}"
    if box and box.value != want:
        return type_(box, f.get("target", ""))
    return _submit(els)


def x_time(f, u, els, memo):
    box = next((e for e in els if e.tag == "input" and e.type == "time"), None)
    m = re.match(r"(\d+):(\d+) ?([AP]M)", f.get("target", ""))
    if box and m:
        h, mi, ap = int(m.group(1)), m.group(2), m.group(3)
        h24 = (h % 12) + (12 if ap == "PM" else 0)
        if box.value != f"{h24:02d}:{mi}":
            return type_(box, f"{h:02d}{mi}{ap}")
    return _submit(els)


MOVIE_WORDS = {"genre": ("genre",), "director": ("director", "name"), "year": ("year", "date", "released")}


def x_movies(f, u, els, memo):
    pairs = []
    for key, words in MOVIE_WORDS.items():
        box = next((e for e in _text_fields(els) if any(w in (e.label + " " + e.placeholder).lower() for w in words)),
                   None)
        pairs.append((box, f.get(key, "")))
    return _fill(els, pairs) or _submit(els)


EXPERTS = {
    "click-button": x_click_named, "click-button-sequence": x_button_sequence, "click-checkboxes": x_checkboxes,
    "click-checkboxes-large": x_checkboxes, "click-checkboxes-transfer": x_checkboxes,
    "click-collapsible": x_collapsible, "click-dialog": x_dialog, "click-dialog-2": x_click_named,
    "click-link": x_click_named, "click-option": x_option, "click-tab": x_tab, "click-tab-2": x_tab_2,
    "click-test": x_click_test, "click-test-2": x_click_named, "click-test-transfer": x_click_named,
    "click-widget": x_widget, "enter-password": x_password, "enter-text": x_enter_text,
    "enter-text-dynamic": x_enter_text, "enter-text-2": x_enter_text_2, "focus-text": x_focus,
    "focus-text-2": x_focus, "login-user": x_login, "login-user-popup": x_login, "choose-list": x_choose_list,
    "use-autocomplete-nodelay": x_autocomplete, "form-sequence-2": x_form_sequence_2, "enter-date": x_date,
    "enter-time": x_time, "multi-layouts": x_movies, "multi-orderings": x_movies,
}

SUBMIT = {"name": "submit", "arguments": {}}


def _apply(els: list[El], call: dict) -> bool:
    """Apply a fill or a tick to the parsed page as the browser will; False for calls whose effect is not known
    here (a click on anything else may change the page)."""
    el = next((e for e in els if e.ref == call["arguments"].get("ref")), None)
    if el is None:
        return False
    if call["name"] == "type":
        el.value = call["arguments"]["text"] if el.type not in ("date", "time") else el.value
        return el.type not in ("date", "time")
    if call["name"] == "select":
        el.value = call["arguments"]["option"]
        return True
    if call["name"] == "click" and el.tag == "input" and el.type in ("checkbox", "radio"):
        if el.type == "radio":
            for e in els:
                if e.tag == "input" and e.type == "radio":
                    e.checked = False
        el.checked = not el.checked if el.type == "checkbox" else True
        return True
    return False


@dataclass
class WebExpert:
    """The expert of every suite task (see the module docstring)."""

    env_name: str = "web_form_env"
    seed: int = 0
    kind: str = "expert"
    template: str = ""
    fields: dict = field(default_factory=dict)
    memo: dict = field(default_factory=dict)

    def reset(self, info: ResetInfo) -> None:
        self.template = info.get("template", "")
        self.fields = dict(info.get("fields") or {})
        self.memo = {}
        if self.template not in EXPERTS:
            raise ValueError(f"no web expert for task {self.template!r}")

    def next_call(self, els: list[El]) -> dict | None:
        return EXPERTS[self.template](self.fields, "", els, self.memo)

    def calls(self, observation: str) -> list[dict]:
        """One turn's calls: the fills and ticks that do not change the page's layout, together; a click that
        may (a button, a tab, a link, the submit button) ends the turn, so the next one reads the page first."""
        els = parse_elements(observation)
        out: list[dict] = []
        for _ in range(8):
            saved = json.loads(json.dumps(self.memo)), self.notes()
            call = self.next_call(els)
            batchable = call is not None and _apply(els, call)
            if out and not batchable:
                # that call is for the next turn: undo what choosing it noted (a mistake is made then, or not)
                self.memo = saved[0]
                if "mistake" in saved[1]:
                    self.mistake = saved[1]["mistake"]
                break
            out.append(call or SUBMIT)
            if not batchable or self._stop_turn():
                break
        return out

    def _stop_turn(self) -> bool:
        return False

    def act(self, observation: str, history: list[dict]) -> str:
        if not self.template:
            raise RuntimeError("call policy.reset(info) before act()")
        return "\n".join(format_tool_call(c["name"], c["arguments"]) for c in self.calls(observation))

    def notes(self) -> dict:
        return {"policy": self.kind}


MISTAKES = ("wrong field", "typo", "wrong click", "early submit")


def draw_mistake(seed: int, task_id: str, kind: str, p_correct: float) -> tuple[random.Random, str]:
    """(the episode's RNG, the mistake a noisy expert plans: "" for none), drawn from (seed, task_id) so an episode
    replays the same; the recover kind makes only the mistakes it can repair (not an early submit)."""
    rng = random.Random(f"{seed}:{task_id}")
    choices = MISTAKES if kind == "noisy" else MISTAKES[:3]
    return rng, "" if rng.random() < p_correct else rng.choice(choices)


@dataclass
class NoisyWebExpert(WebExpert):
    """The expert with one realistic mistake in about half the episodes (see the module docstring)."""

    kind: str = "noisy"
    p_correct: float = 0.45
    mistake: str = "none"
    _plan: str = ""
    _slipped: bool = False
    _rng: random.Random = field(default_factory=random.Random)

    def reset(self, info: ResetInfo) -> None:
        super().reset(info)
        self.mistake = "none"
        self._rng, self._plan = draw_mistake(self.seed, info["task_id"], self.kind, self.p_correct)

    def next_call(self, els: list[El]) -> dict | None:
        call = super().next_call(els)
        self._slipped = False
        if not self._plan or self.mistake != "none" or call is None:
            return call
        wrong = None
        if self._plan in ("wrong field", "typo") and call["name"] == "type":
            text = call["arguments"]["text"]
            if self._plan == "typo" and len(text) >= 2:
                wrong = type_(El(call["arguments"]["ref"], "input"), _typo(self._rng, text))
            others = [e for e in els if e.text_field and e.ref != call["arguments"]["ref"]]
            if self._plan == "wrong field" and others:
                wrong = type_(self._rng.choice(others), text)
        elif self._plan == "wrong click" and call["name"] == "click":
            boxes = [e for e in els if e.tag == "input" and e.type in ("checkbox", "radio")
                     and e.ref != call["arguments"]["ref"]]
            if boxes:
                wrong = click(self._rng.choice(boxes))
        elif self._plan == "early submit" and call["name"] == "type" and self.memo.get("typed"):
            wrong = _submit(els)
        if call["name"] == "type":
            self.memo["typed"] = True
        if wrong is not None:
            self.mistake = self._plan
            self._slipped = True  # the turn ends with the mistake: it is seen on the next page
            return wrong
        return call

    def _stop_turn(self) -> bool:
        return self._slipped

    def notes(self) -> dict:
        return {"policy": self.kind, "mistake": self.mistake}


def make_web_policy(env_name: str, kind: str, seed: int = 0):
    """expert | noisy | recover (the noisy expert: its mistakes are followed by the repair) | random."""
    if env_name == "web_mix_env":  # each episode played by the policy of its task's kind (envs/web/mix.py)
        from envs.web.mix import MixPolicy
        return MixPolicy(make_web_policy, kind, seed)
    if env_name == "web_gen_env":  # generated forms: experts of their own (envs/web/generated/expert.py)
        from envs.web.generated.expert import make_gen_policy
        return make_gen_policy(kind, seed)
    if kind == "expert":
        return WebExpert(env_name, seed)
    if kind in ("noisy", "recover"):
        return NoisyWebExpert(env_name, seed, kind=kind, p_correct=0.45 if kind == "noisy" else 0.5)
    if kind == "random":
        return RandomPolicy(env_name, seed)
    raise ValueError(f"unknown policy {kind!r}; policies: expert, noisy, recover, random")


__all__ = ["WebExpert", "NoisyWebExpert", "make_web_policy", "parse_elements", "EXPERTS"]
