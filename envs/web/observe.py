"""What the agent sees of a page: the task's instruction and a compact element list, as text.

`SNAPSHOT_JS` runs in the page and returns, in one round trip, MiniWoB's episode state (done, raw reward) and
the visible elements in document order: each gets a ref that stays the same for the whole episode (a
`data-lref` attribute stamped with the episode number, so a field keeps its ref after other fields change).
An element is listed when it is a control (input, textarea, select, button, link, label, an option of a
jQuery UI menu) or holds text of its own; pure containers are left out, and so is MiniWoB's own chrome
(the instruction box, the reward display, the start cover).

`element_list` renders the snapshot as one line per element, e.g.

    [3] input text label="Username" value=""
    [5] input checkbox label="xkq" checked
    [7] select options=[Alaska|Texas] selected="Alaska"
    [9] button "Submit"

The bound is per observation, not per element: the texts, labels, placeholders and values of the listed
elements are shown whole while together they fit `TEXT_BUDGET` characters (a long paragraph that holds the
answer, a long instruction-like label, reaches the model in full); past that, every text is cut at one length,
the largest that fits the budget and never below `TEXT_CHARS` (a page of many long texts loses their tails
first, short ones stay whole). An option is cut at 30 characters and a select shows 20 options. The list
stops at `MAX_ELEMENTS` lines (a last line says how many were left out), so a page's observation stays within
a small model's context.
"""
from __future__ import annotations

import json

TEXT_CHARS = 60  # the shortest cut: a text is cut below its length only when the budget needs it
TEXT_BUDGET = 2400  # characters of text (texts, labels, placeholders, values) in one observation's element list
MAX_ELEMENTS = 60
_TEXT_KEYS = ("text", "label", "placeholder", "value")

SNAPSHOT_JS = r"""
const eps = String(window.__lachesisEpisode || 0);
if (window.__lachesisNext === undefined) window.__lachesisNext = 1;
const skip = new Set(['reward-display', 'sync-task-cover', 'click-canvas', 'query', 'attention-canvas']);
const CONTROLS = new Set(['INPUT', 'TEXTAREA', 'SELECT', 'BUTTON', 'A', 'LABEL']);
const out = [];
function visible(el) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return false;
  const cs = window.getComputedStyle(el);
  return cs.visibility !== 'hidden' && cs.display !== 'none' && cs.opacity !== '0';
}
function ownText(el) {
  let t = '';
  el.childNodes.forEach(n => { if (n.nodeType === 3) t += ' ' + n.data; });
  return t.replace(/\s+/g, ' ').trim();
}
function plainText(root) {  // the text of root outside buttons, links and selects (a label, not a control)
  let t = '';
  const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = w.nextNode(); n; n = w.nextNode()) {
    if (!n.parentElement.closest('button, a, select, textarea, script, style')) t += ' ' + n.data;
  }
  return t.replace(/\s+/g, ' ').trim();
}
function labelOf(el) {
  if (el.id) {
    const l = document.querySelector('label[for="' + CSS.escape(el.id) + '"]');
    if (l) return l.textContent.replace(/\s+/g, ' ').trim();
  }
  const wrap = el.closest('label');
  if (wrap) return wrap.textContent.replace(/\s+/g, ' ').trim();
  if (el.getAttribute('aria-label')) return el.getAttribute('aria-label');
  // No label element: the text of the nearest ancestor (up to 3 up) that holds this one field and some text
  // (a <p>Director: <input></p>, a table row, a div with the label text after the field)
  let a = el.parentElement;
  for (let i = 0; i < 3 && a && a !== document.body && a.id !== 'area' && a.id !== 'wrap'; i++, a = a.parentElement) {
    if (a.querySelectorAll('input, textarea, select').length !== 1) break;
    const t = plainText(a);
    if (t) return t;
  }
  return '';
}
function walk(el) {
  if (skip.has(el.id) || el.tagName === 'SCRIPT' || el.tagName === 'STYLE') return;
  if (!visible(el)) return;
  const tag = el.tagName;
  const text = ownText(el);
  const menuItem = el.classList && (el.classList.contains('ui-menu-item') || el.classList.contains('ui-menu-item-wrapper'));
  const wrapsField = tag === 'LABEL' && el.querySelector('input, textarea, select');
  if (wrapsField) {  // the field inside lists the label's text as its own label
    for (const c of el.children) walk(c);
    return;
  }
  if (CONTROLS.has(tag) || text || menuItem || el.getAttribute('role') === 'button' || el.onclick) {
    if (el.dataset.lref === undefined || el.dataset.leps !== eps) {
      el.dataset.lref = String(window.__lachesisNext++);
      el.dataset.leps = eps;
    }
    const e = {ref: +el.dataset.lref, tag: tag.toLowerCase(), text: text};
    if (tag === 'INPUT') {
      e.type = el.type;
      if (el.type === 'checkbox' || el.type === 'radio') e.checked = el.checked; else e.value = el.value;
      e.label = labelOf(el);
      e.placeholder = el.placeholder || '';
    } else if (tag === 'TEXTAREA') {
      e.value = el.value; e.label = labelOf(el); e.placeholder = el.placeholder || '';
    } else if (tag === 'SELECT') {
      e.options = Array.from(el.options).map(o => o.text.trim());
      e.value = el.selectedIndex >= 0 ? el.options[el.selectedIndex].text.trim() : '';
      e.label = labelOf(el);
    } else if (tag === 'LABEL' || tag === 'BUTTON' || tag === 'A') {
      e.text = el.textContent.replace(/\s+/g, ' ').trim();
    }
    if (document.activeElement === el && tag !== 'BODY') e.focused = true;
    if (el.disabled) e.disabled = true;
    out.push(e);
    if (tag === 'SELECT' || tag === 'BUTTON' || tag === 'A' || tag === 'LABEL') return;
  }
  for (const c of el.children) walk(c);
}
walk(document.body);
const q = document.getElementById('query');
return {utterance: q ? q.textContent.replace(/\s+/g, ' ').trim() : '',
        done: !!WOB_DONE_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON,
        elements: out};
"""


def _cut(text: str, n: int = TEXT_CHARS) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


def text_cap(elements: list[dict], budget: int = TEXT_BUDGET) -> int:
    """The length every text of these elements is cut at: the largest whose total fits `budget` (no cut at all
    when everything fits), never below TEXT_CHARS."""
    lengths = [len(str(e[k])) for e in elements for k in _TEXT_KEYS if e.get(k)]
    if sum(lengths) <= budget:
        return max(lengths, default=TEXT_CHARS)
    lo, hi = TEXT_CHARS, max(lengths)  # the total is monotone in the cap: bisect for the largest that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def element_line(e: dict, cap: int = TEXT_CHARS) -> str:
    """One element as a line: `[ref] tag [type] ["text"] [label=.. placeholder=.. value=..] [checked] ...`, each
    text cut at `cap` characters."""

    def _q(text: str) -> str:
        return json.dumps(_cut(text, cap), ensure_ascii=False)

    parts = [f"[{e['ref']}]", e["tag"]]
    if e.get("type"):
        parts.append(e["type"])
    if e.get("text") and e["tag"] not in ("input", "textarea"):
        parts.append(_q(e["text"]))
    for key in ("label", "placeholder"):
        if e.get(key) and not (key == "label" and e["tag"] == "label"):
            parts.append(f"{key}={_q(e[key])}")
    if "options" in e:
        parts.append("options=[" + "|".join(_cut(o, 30) for o in e["options"][:20])
                     + ("|..." if len(e["options"]) > 20 else "") + "]")
        parts.append(f"selected={_q(e.get('value', ''))}")
    elif "value" in e:
        parts.append(f"value={_q(e['value'])}")
    if e.get("checked") is True:
        parts.append("checked")
    for flag in ("focused", "disabled"):
        if e.get(flag):
            parts.append(flag)
    return " ".join(parts)


def element_list(elements: list[dict], limit: int = MAX_ELEMENTS) -> str:
    shown = elements[:limit]
    cap = text_cap(shown)
    lines = [element_line(e, cap) for e in shown]
    if len(elements) > limit:
        lines.append(f"... {len(elements) - limit} more elements not shown")
    return "\n".join(lines) if lines else "(no visible elements)"


def render(snapshot: dict, *, with_instruction: bool) -> str:
    """The observation text of a snapshot: the instruction first after a reset, then the elements."""
    head = f"Task: {snapshot['utterance']}\n" if with_instruction else ""
    return f"{head}Page:\n{element_list(snapshot['elements'])}"
