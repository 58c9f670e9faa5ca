"""The web tools, in the project's one tool-call format (transcript/toolcalls.py), and how each acts on a page.

    click(ref)            a real mouse click on the element (Selenium), as a person would: a hidden or
                          covered element cannot be clicked
    type(ref, text)       focus a text field, select what it holds and type `text` over it, key by key
    select(ref, option)   choose an option of a <select> by its text
    press(key)            one key on the focused element: Enter, Tab, Escape, Backspace, Delete, Space,
                          ArrowUp/Down/Left/Right, Home, End
    submit() / done()     end the episode (the page's own Submit button is clicked with `click`)

`perform(page, call)` runs one call and returns a one-line result. Arguments that are missing or of the wrong
kind raise ToolArgumentError (a malformed call); a well-formed call that cannot act (no element with that
ref, a button that is covered, typing into a checkbox, an option that is not there) raises ToolFailed with
the observation that says why. Typed text is capped at MAX_TYPE_CHARS: a field holds a word or a sentence,
and typing key by key costs time per character.
"""
from __future__ import annotations

import re

from envs.core.tools import SUBMIT_SCHEMA, ToolArgumentError, ToolFailed, tool_schema
from transcript.toolcalls import ToolCall

MAX_TYPE_CHARS = 500
KEYS = {"enter": "ENTER", "return": "ENTER", "tab": "TAB", "escape": "ESCAPE", "esc": "ESCAPE",
        "backspace": "BACKSPACE", "delete": "DELETE", "space": "SPACE", "arrowup": "ARROW_UP", "up": "ARROW_UP",
        "arrowdown": "ARROW_DOWN", "down": "ARROW_DOWN", "arrowleft": "ARROW_LEFT", "left": "ARROW_LEFT",
        "arrowright": "ARROW_RIGHT", "right": "ARROW_RIGHT", "home": "HOME", "end": "END"}
END_TOOLS = ("submit", "done")

TOOLS = [
    tool_schema("click", "Click the element [ref] of the page.", {"ref": "the element's number"}),
    tool_schema("type", "Type text into the text field [ref] (replaces what it holds).",
                {"ref": "the field's number", "text": "the text to type"}),
    tool_schema("select", "Choose an option of the select [ref] by its text.",
                {"ref": "the select's number", "option": "the option's text"}),
    tool_schema("press", "Press a key (Enter, Tab, Escape, Backspace, ArrowDown, ...).", {"key": "the key"}),
    SUBMIT_SCHEMA,
    {"type": "function", "function": {"name": "done", "description": "Finish the task (the same as submit).",
                                      "parameters": {"type": "object", "properties": {}, "required": []}}},
]


def ref_arg(call: ToolCall) -> int:
    """The `ref` argument as an int ("7", 7 and "[7]" all mean element 7)."""
    raw = call.arguments.get("ref")
    if isinstance(raw, bool):
        raw = None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        m = re.fullmatch(r"\s*\[?\s*(-?\d+)\s*\]?\s*", raw)
        if m:
            return int(m.group(1))
    raise ToolArgumentError(f"{call.name} needs an argument 'ref': the [number] of an element in the list")


def text_arg(call: ToolCall, key: str, *, limit: int | None = None) -> str:
    value = call.arguments.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # a number typed as a number: {"text": 45}
    if not isinstance(value, str):
        raise ToolArgumentError(f"{call.name} needs a string argument {key!r}")
    if limit is not None and len(value) > limit:
        raise ToolArgumentError(f"{call.name}: {key!r} has {len(value)} characters; at most {limit} are typed")
    return value


def _element(driver, ref: int):
    """The element with this ref in the current episode (refs of an earlier episode are stale)."""
    el = driver.execute_script(
        "return document.querySelector('[data-lref=\"' + arguments[0] + '\"][data-leps=\"' +"
        " String(window.__lachesisEpisode || 0) + '\"]');", int(ref))
    if el is None:
        raise ToolFailed(f"error: no element [{ref}] on the page; use a [number] from the element list")
    return el


def _short(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    text = (lines[0] if lines else type(exc).__name__).removeprefix("Message: ")
    return text.split(" (Session info")[0][:160]


def _click(driver, ref: int) -> str:
    """A trusted mouse click (moved, pressed, released: the input events a person's click makes, through the
    DevTools input domain, as chromedriver's own click does but without its waits) at a point of the element
    that nothing covers: a partly covered button is clicked where it shows, a hidden or fully covered one
    cannot be."""
    spot = driver.execute_script(CLICK_POINT_JS, int(ref))
    if spot is None:
        raise ToolFailed(f"error: no element [{ref}] on the page; use a [number] from the element list")
    if isinstance(spot, str):
        raise ToolFailed(f"error: element [{ref}] cannot be clicked: {spot}")
    x, y = spot
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                           "buttons": 1 if kind == "mousePressed" else 0,
                                                           "clickCount": 1})
    return f"clicked [{ref}]"


# The element of a ref (this episode's), scrolled into view; a viewport point of it that no other element covers,
# or why there is none.
CLICK_POINT_JS = """
const el = document.querySelector('[data-lref="' + arguments[0] + '"][data-leps="' +
                                  String(window.__lachesisEpisode || 0) + '"]');
if (!el) return null;
let r = el.getBoundingClientRect();
if (r.width === 0 || r.height === 0) return 'it is not visible';
if (r.top < 0 || r.left < 0 || r.bottom > window.innerHeight || r.right > window.innerWidth) {
  el.scrollIntoView({block: 'center', inline: 'center'});
  r = el.getBoundingClientRect();
}
let cover = null;
for (const fy of [0.5, 0.3, 0.7, 0.1, 0.9]) for (const fx of [0.5, 0.3, 0.7, 0.1, 0.9]) {
  const x = r.left + fx * r.width, y = r.top + fy * r.height, top = document.elementFromPoint(x, y);
  if (top && (top === el || el.contains(top))) return [Math.round(x), Math.round(y)];
  cover = cover || top;
}
return cover ? 'it is covered by a ' + cover.tagName.toLowerCase() + (cover.dataset.lref ? ' [' + cover.dataset.lref + ']' : '')
             : 'it is outside the page';
"""


def _type(driver, ref: int, text: str) -> str:
    from selenium.common.exceptions import WebDriverException

    el = _element(driver, ref)
    tag = el.tag_name.lower()
    kind = (el.get_attribute("type") or "").lower()
    if tag not in ("input", "textarea") or kind in ("checkbox", "radio", "button", "submit", "range", "color"):
        what = f"{tag} {kind}".strip()
        raise ToolFailed(f"error: element [{ref}] is a {what}, not a text field; click it instead")
    try:
        # select what the field holds so the typed text replaces it (a date field selects a segment: cleared)
        driver.execute_script("const e = arguments[0]; e.focus(); if (e.select) { try { e.select(); } catch (x) {} }"
                              "if (e.type === 'date' || e.type === 'time') e.value = '';", el)
        el.send_keys(text if text else "\b")
    except WebDriverException as exc:
        if "invalid session" in str(exc) or "disconnected" in str(exc):
            raise
        raise ToolFailed(f"error: cannot type into [{ref}]: {_short(exc)}") from None
    return f"typed {len(text)} characters into [{ref}]"


def _select(driver, ref: int, option: str) -> str:
    from selenium.webdriver.support.ui import Select

    el = _element(driver, ref)
    if el.tag_name.lower() != "select":
        raise ToolFailed(f"error: element [{ref}] is a {el.tag_name.lower()}, not a select; click it instead")
    sel = Select(el)
    texts = [o.text.strip() for o in sel.options]
    match = next((i for i, t in enumerate(texts) if t == option.strip()), None)
    if match is None:
        match = next((i for i, t in enumerate(texts) if t.lower() == option.strip().lower()), None)
    if match is None:
        shown = "|".join(texts[:20])
        raise ToolFailed(f"error: select [{ref}] has no option {option[:60]!r}; options: {shown}")
    sel.select_by_index(match)
    return f"selected {texts[match]!r} in [{ref}]"


def _press(driver, key: str) -> str:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    name = KEYS.get(key.strip().lower().replace(" ", "").replace("_", ""))
    if name is None:
        raise ToolFailed(f"error: unknown key {key[:30]!r}; keys: Enter, Tab, Escape, Backspace, Delete, Space, "
                         "ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End")
    ActionChains(driver).send_keys(getattr(Keys, name)).perform()
    return f"pressed {key.strip()}"


def perform(page, call: ToolCall) -> str:
    """Run one tool call (not an end tool) on the page; the one-line result (see the module docstring)."""
    if call.name == "click":
        ref = ref_arg(call)
        return page.call(_click, ref)
    if call.name == "type":
        ref = ref_arg(call)
        text = text_arg(call, "text", limit=MAX_TYPE_CHARS)
        return page.call(_type, ref, text)
    if call.name == "select":
        ref = ref_arg(call)
        option = text_arg(call, "option")
        return page.call(_select, ref, option)
    if call.name == "press":
        key = text_arg(call, "key")
        return page.call(_press, key)
    raise ToolArgumentError(f"unknown tool {call.name!r}")
