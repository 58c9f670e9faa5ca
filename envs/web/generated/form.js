/* Lachesis web_gen_env: builds a generated form from its spec (envs/web/generated/spec.py) and judges it.

   buildForm(spec) replaces the page's form with the spec's (a new episode: refs of the last one go stale), shows
   the instruction in #query and resets the episode state that observe.py's SNAPSHOT_JS reads: WOB_DONE_GLOBAL,
   WOB_RAW_REWARD_GLOBAL (1 when every widget holds its expected state and a popup was answered as asked, else
   -1), WOB_REWARD_REASON. The submit button (after the confirm dialog's yes, if any) ends the episode. Nothing
   here draws anything at random: the same spec gives the same page. */
'use strict';
var WOB_DONE_GLOBAL = false;
var WOB_RAW_REWARD_GLOBAL = 0;
var WOB_REWARD_REASON = null;
var WOB_TASK_READY = false;
var FORM = null;

function h(tag, attrs, text) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'cls') el.className = v; else el.setAttribute(k, v);
  }
  if (text !== undefined && text !== null) el.textContent = text;
  return el;
}

function status(text) { document.getElementById('status').textContent = text; }

function control(w, layout) {
  const id = 'f-' + w.id;
  if (w.kind === 'select') {
    const s = h('select', {id: id, 'data-wid': w.id});
    if (w.placeholder_option) s.appendChild(h('option', {value: ''}, w.placeholder_option));
    for (const o of w.options) s.appendChild(h('option', {value: o}, o));
    s.value = w.default;
    return s;
  }
  if (w.kind === 'radio' || w.kind === 'checkbox') {
    const box = h('div', {cls: 'opts'});
    w.options.forEach((o, i) => {
      const inp = h('input', {type: w.kind, name: id, id: id + '-' + i, value: o, 'data-wid': w.id});
      inp.checked = w.kind === 'radio' ? w.default === o : w.default.includes(o);
      const lab = h('label');
      lab.appendChild(inp);
      lab.appendChild(document.createTextNode(' ' + o));
      box.appendChild(lab);
    });
    return box;
  }
  const type = w.kind === 'password' ? 'password' : (w.kind === 'date' && w.native ? 'date' : 'text');
  const inp = h('input', {id: id, type: type, autocomplete: 'off', 'data-wid': w.id});
  if (layout === 'placeholder' && !w.native) inp.placeholder = w.label + (w.hint ? ' (' + w.hint + ')' : '');
  else if (w.hint) inp.placeholder = w.hint;
  // a native date shows no placeholder, and an autocomplete's list would read as its label: both name themselves
  if ((layout === 'placeholder' && w.native) || w.kind === 'autocomplete') inp.setAttribute('aria-label', w.label);
  if (w.kind !== 'autocomplete') return inp;
  inp.setAttribute('role', 'combobox');
  const wrap = h('span', {cls: 'ac-wrap'});
  const ul = h('ul', {cls: 'ac', style: 'display: none'});
  const hide = () => { ul.style.display = 'none'; ul.innerHTML = ''; };
  inp.addEventListener('input', () => {
    const q = inp.value.trim().toLowerCase();
    hide();
    if (!q) return;
    for (const o of w.options.filter(o => o.toLowerCase().startsWith(q)).slice(0, 8)) {
      const li = h('li', {}, o);
      li.addEventListener('mousedown', e => {  // mousedown, not click: the field keeps its focus
        e.preventDefault();
        inp.value = o;
        hide();
        inp.dispatchEvent(new Event('change', {bubbles: true}));
      });
      ul.appendChild(li);
    }
    if (ul.children.length) ul.style.display = 'block';
  });
  inp.addEventListener('keydown', e => { if (e.key === 'Escape') hide(); });
  inp.addEventListener('blur', hide);
  wrap.appendChild(inp);
  wrap.appendChild(ul);
  return wrap;
}

function block(w, layout) {
  const ctl = control(w, layout);
  const group = w.kind === 'radio' || w.kind === 'checkbox';
  const cap = w.label + (w.required ? ' *' : '');
  if (layout === 'table') {
    const tr = h('tr');
    tr.appendChild(h('td', {}, cap));
    const td = h('td');
    td.appendChild(ctl);
    tr.appendChild(td);
    return tr;
  }
  const div = h('div', {cls: 'field'});
  if (layout === 'placeholder') {
    if (group && w.label) div.appendChild(h('div', {cls: 'cap'}, w.label));
  } else if (layout.endsWith('left')) {
    div.classList.add('left');
    if (w.kind === 'autocomplete' || group) div.appendChild(h('span', {cls: 'cap'}, cap));
    else div.appendChild(h('span', {cls: 'cap'}, cap + ':'));
  } else if (group) {
    div.appendChild(h('div', {cls: 'cap'}, cap));
  } else {
    div.appendChild(h('label', {cls: 'cap', for: 'f-' + w.id}, cap));
  }
  div.appendChild(ctl);
  return div;
}

function fieldsOf(widgets, layout) {
  const box = h(layout === 'table' ? 'table' : 'div', {cls: 'fields' + (layout.startsWith('columns') ? ' two' : '')});
  const body = layout === 'table' ? box.appendChild(h('tbody')) : box;
  for (const w of widgets) body.appendChild(block(w, layout));
  return box;
}

function overlay(text, buttons, onClick) {
  // on the body itself: a container of fixed children has no size, and observe.py lists no hidden subtree
  const layer = document.body;
  const ov = h('div', {cls: 'overlay'});
  const dlg = h('div', {cls: 'dialog', role: 'dialog'});
  dlg.appendChild(h('p', {}, text));
  for (const b of buttons) {
    const btn = h('button', {type: 'button'}, b);
    btn.addEventListener('click', () => { layer.removeChild(ov); onClick(b); });
    dlg.appendChild(btn);
  }
  ov.appendChild(dlg);
  layer.appendChild(ov);
}

function showPopup() {
  if (FORM.popupShown || !FORM.spec.popup) return;
  FORM.popupShown = true;
  const p = FORM.spec.popup;
  overlay(p.text, p.buttons, b => { FORM.popupAnswer = b; });
}

function widgetEls(w) { return Array.from(document.querySelectorAll('[data-wid="' + w.id + '"]')); }

function stateOf(w) {
  const els = widgetEls(w);
  if (w.kind === 'radio') { const c = els.find(e => e.checked); return c ? c.value : ''; }
  if (w.kind === 'checkbox') return els.filter(e => e.checked).map(e => e.value);
  if (w.kind === 'select') return els[0].value;
  return els[0].value.trim();
}

function setState(w, value) {
  const els = widgetEls(w);
  if (w.kind === 'radio' || w.kind === 'checkbox') els.forEach(e => { e.checked = [].concat(value).includes(e.value); });
  else els[0].value = value;
}

function keyOf(w) { const name = w.label || w.options[0]; return w.ordinal ? name + ' #' + w.ordinal : name; }

function judge() {
  const s = FORM.spec;
  if (s.popup && FORM.popupAnswer !== s.popup.answer) {
    return [-1, FORM.popupAnswer === null ? 'the popup was not answered' : 'the popup was answered wrong'];
  }
  for (const w of s.widgets) {
    if (JSON.stringify(stateOf(w)) !== JSON.stringify(w.expected)) {
      return [-1, (w.target ? 'wrong value in "' : 'changed "') + keyOf(w) + '"'];
    }
  }
  return [1, 'every field holds its value'];
}

function finish() {
  if (WOB_DONE_GLOBAL) return;
  const [reward, reason] = judge();
  WOB_RAW_REWARD_GLOBAL = reward;
  WOB_REWARD_REASON = reason;
  WOB_DONE_GLOBAL = true;
  status('Thank you, the form was sent.');
}

function press(text, behaviour) {
  if (behaviour === 'submit') {
    if (FORM.spec.confirm) {
      const c = FORM.spec.confirm;
      overlay(c.text, [c.yes, c.no], b => { if (b === c.yes) finish(); });
    } else finish();
  } else if (behaviour === 'reset') {
    FORM.spec.widgets.forEach(w => setState(w, w.default));
    status('The form was cleared.');
  } else if (behaviour === 'help') {
    const help = document.getElementById('help');
    help.style.display = help.style.display === 'none' ? 'block' : 'none';
  } else {
    status(text === 'Save draft' ? 'Draft saved.' : 'Not available in this form.');
  }
}

function buildForm(spec) {
  window.__lachesisEpisode = (window.__lachesisEpisode || 0) + 1;
  WOB_DONE_GLOBAL = false; WOB_RAW_REWARD_GLOBAL = 0; WOB_REWARD_REASON = null;
  FORM = {spec: spec, popupShown: false, popupAnswer: null};
  if (document.activeElement) document.activeElement.blur();
  document.getElementById('query').textContent = spec.instruction;
  document.querySelectorAll('body > .overlay').forEach(o => o.remove());
  const old = document.getElementById('root');
  const root = h('div', {id: 'root'});  // a new node: the last form's listeners go with the old one
  old.parentNode.replaceChild(root, old);
  root.appendChild(h('h2', {}, spec.title));
  for (const n of spec.notes) root.appendChild(h('p', {}, n));
  const main = spec.widgets.filter(w => !w.container);
  if (spec.tabs.length) {
    const bar = h('div', {cls: 'tabbar', role: 'tablist'});
    const panels = spec.tabs.map((t, i) => {
      const p = h('div', {cls: 'panel', role: 'tabpanel'});
      p.appendChild(fieldsOf(spec.widgets.filter(w => w.container === 'tab:' + i), spec.layout));
      return p;
    });
    const show = i => panels.forEach((p, j) => {
      p.style.display = i === j ? 'block' : 'none';
      bar.children[j].classList.toggle('active', i === j);
    });
    spec.tabs.forEach((t, i) => {
      const b = h('button', {type: 'button', cls: 'tab', role: 'tab'}, t);
      b.addEventListener('click', () => show(i));
      bar.appendChild(b);
    });
    root.appendChild(bar);
    panels.forEach(p => root.appendChild(p));
    show(0);
  }
  if (main.length) root.appendChild(fieldsOf(main, spec.layout));
  if (spec.section) {
    const sec = h('div', {cls: 'section'});
    const head = h('h3', {cls: 'toggle', role: 'button', tabindex: '0'}, spec.section);
    const body = h('div', {cls: 'body', style: 'display: none'});
    body.appendChild(fieldsOf(spec.widgets.filter(w => w.container === 'section'), spec.layout));
    head.addEventListener('click', () => {
      const open = body.style.display === 'none';
      body.style.display = open ? 'block' : 'none';
      sec.classList.toggle('open', open);
    });
    sec.appendChild(head);
    sec.appendChild(body);
    root.appendChild(sec);
  }
  root.appendChild(h('p', {id: 'help', style: 'display: none'}, 'Questions? Write to the help desk.'));
  const row = h('div', {cls: 'buttons'});
  for (const [text, behaviour] of spec.buttons) {
    const b = h('button', {type: 'button'}, text);
    b.addEventListener('click', () => press(text, behaviour));
    row.appendChild(b);
  }
  root.appendChild(row);
  if (spec.links.length) {
    const links = h('div', {cls: 'links'});
    for (const l of spec.links) {
      const a = h('a', {href: '#'}, l);
      a.addEventListener('click', e => { e.preventDefault(); status('Not available in this form.'); });
      links.appendChild(a);
    }
    root.appendChild(links);
  }
  root.appendChild(h('p', {id: 'status'}));
  if (spec.popup && spec.popup.appear === 'start') showPopup();
  else if (spec.popup) {
    root.addEventListener('input', showPopup, true);
    root.addEventListener('change', showPopup, true);
  }
  window.scrollTo(0, 0);
  WOB_TASK_READY = true;
  return true;
}
