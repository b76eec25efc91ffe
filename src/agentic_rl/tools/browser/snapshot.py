"""A page as compact text a small model can act on: one line per element, each with a stable ref.

:func:`take_snapshot` runs one script in the page (Selenium's ``execute_script``) that walks the
visible DOM in document order and returns the elements worth showing:

* interactive ones (links, buttons, inputs, selects, text areas, labels, elements with a
  ``role``, a ``tabindex``, an ``onclick``, a jQuery or d3 click handler, or a pointer cursor of
  their own), and
* elements with text of their own (text nodes directly inside them); text mixed with child
  elements (a paragraph with links in it) is shown as ``text "..."`` lines, in order.

Each shown element gets a ref, written into the page as its ``data-arl-ref`` attribute: a ref
stays with its element while the element lives (so it is stable across turns), and new elements
get new numbers. ``reset_refs=True`` (an env's ``reset``) clears every ref and starts again at 1,
so the same page gives the same refs in every episode. A ref below :attr:`PageSnapshot.next_ref`
whose element is gone is *stale*; a ref at or above it was never shown (*unknown*); the action
layer (:mod:`agentic_rl.tools.browser.actions`) tells the two apart in its error observations.

Rendering (:meth:`PageSnapshot.render`), one line per element, indented under its shown parent::

    [3] button#subbtn "Submit"
    [5] textbox#username value="" (focused)
    [7] checkbox#ch0 "91YPF" checked=false
    [9] combobox#options value="Ghana" options=["Ghana", "Peru", "Chad"]
    text "Lorem ipsum dolor"
    [12] span.alink "sit"

Kinds: ``link``, ``button``, ``textbox`` (with ``type=password`` etc. when not text),
``checkbox``, ``radio``, ``combobox`` (a ``<select>``), ``listbox`` (a multiple ``<select>``),
``label``, ``heading``, ``listitem``, ``img``, the explicit ``role``, else the tag name; then
``#id`` and the first CSS class (``.class``, when there is no id). Attributes: ``value``,
``checked``, ``options`` (a select's, up to 30), ``placeholder``, ``disabled``, ``(selected)``
(the element or its ``<li>`` is ``active``/``aria-selected``/``aria-current``: the open tab, the
current page of a pager), ``(focused)``.
A label holding just one checkbox or radio button and its text is shown as that input, named by
the label's text. Explicit ARIA roles are kept when they name a control (``tab``, ``option``,
``menuitem``...); landmark and presentation roles are not shown.
Texts are cut to ``max_text`` characters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PageElement", "PageSnapshot", "SNAPSHOT_JS", "take_snapshot"]

SNAPSHOT_JS = r"""
const opts = arguments[0];
const skip = opts.skip || [];
if (opts.resetRefs) {
  document.querySelectorAll('[data-arl-ref]').forEach(e => e.removeAttribute('data-arl-ref'));
  window.__arlNextRef = 1;
}
if (!window.__arlNextRef) window.__arlNextRef = 1;
const clip = s => (s.length > opts.maxText ? s.slice(0, opts.maxText) + '…' : s);
const norm = s => s.replace(/\s+/g, ' ').trim();
const ROLES = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', LABEL: 'label',
  H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
  LI: 'listitem', IMG: 'img', SUMMARY: 'button'};
const INTERACTIVE = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA', 'LABEL', 'SUMMARY']);
const ARIA = new Set(['button', 'link', 'tab', 'checkbox', 'radio', 'option', 'menuitem', 'combobox',
  'textbox', 'listbox', 'switch', 'slider', 'searchbox', 'spinbutton', 'treeitem', 'gridcell']);
function roleOf(el) {
  if (ARIA.has(el.getAttribute('role'))) return el.getAttribute('role');
  if (el.tagName === 'INPUT') {
    const t = (el.type || 'text').toLowerCase();
    if (t === 'checkbox' || t === 'radio') return t;
    if (['button', 'submit', 'reset', 'image'].includes(t)) return 'button';
    return 'textbox';
  }
  if (el.tagName === 'SELECT' && (el.multiple || el.size > 1)) return 'listbox';
  return ROLES[el.tagName] || el.tagName.toLowerCase();
}
function clickable(el) {
  if (INTERACTIVE.has(el.tagName) || el.hasAttribute('onclick') || ARIA.has(el.getAttribute('role'))) return true;
  if (el.hasAttribute('tabindex') || el.onclick || el.__onclick || el.__onmousedown) return true;
  if (window.jQuery && jQuery._data) {
    const ev = jQuery._data(el, 'events');
    if (ev && (ev.click || ev.mousedown || ev.mouseup)) return true;
  }
  const cur = getComputedStyle(el).cursor;
  return cur === 'pointer' && !(el.parentElement && getComputedStyle(el.parentElement).cursor === 'pointer');
}
function shown(el) {
  if (!el.checkVisibility({visibilityProperty: true})) return false;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}
const picked = x => x.classList.contains('active') || x.classList.contains('ui-state-active') ||
  x.getAttribute('aria-selected') === 'true' || x.hasAttribute('aria-current');
const out = [];
function boxLabel(el) {  // a label holding one checkbox/radio and text: shown as that input, named
  if (el.tagName !== 'LABEL' || el.children.length !== 1) return null;
  const input = el.children[0];
  return input.tagName === 'INPUT' && ['checkbox', 'radio'].includes(input.type) ? input : null;
}
function walk(el, depth, name) {
  if (skip.some(s => el.matches(s))) return;
  const boxed = boxLabel(el);
  if (boxed) { if (el.checkVisibility()) walk(boxed, depth, norm(el.textContent)); return; }
  if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'OPTION', 'BR', 'TEMPLATE', 'HEAD'].includes(el.tagName)) return;
  if (!el.checkVisibility()) return;
  const texts = [], kids = [];
  el.childNodes.forEach(c => {
    if (c.nodeType === 3 && norm(c.data)) texts.push(c); else if (c.nodeType === 1) kids.push(c);
  });
  const mixed = texts.length > 0 && kids.length > 0;
  const own = mixed ? '' : norm(texts.map(t => t.data).join(' '));
  const isInput = ['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName);
  let d = depth;
  if (el !== document.body && shown(el) && (own || isInput || clickable(el))) {
    if (!el.dataset.arlRef) el.dataset.arlRef = window.__arlNextRef++;
    const item = {ref: +el.dataset.arlRef, depth: depth, role: roleOf(el), text: clip(name || own),
      id: el.id || '', cls: (typeof el.className === 'string' ? el.className.split(/\s+/)[0] : '') || '',
      focused: document.activeElement === el, disabled: !!el.disabled,
      selected: picked(el) || (el.parentElement && el.parentElement.tagName === 'LI' && picked(el.parentElement))};
    if (el.tagName === 'INPUT') {
      const t = (el.type || 'text').toLowerCase();
      if (t === 'checkbox' || t === 'radio') item.checked = el.checked;
      else if (item.role === 'textbox') { item.value = clip(el.value); if (t !== 'text') item.type = t; }
      else if (el.value) item.text = clip(el.value);
      if (el.placeholder) item.placeholder = clip(el.placeholder);
    } else if (el.tagName === 'TEXTAREA') {
      item.value = clip(el.value);
      if (el.placeholder) item.placeholder = clip(el.placeholder);
    } else if (el.tagName === 'SELECT') {
      const sel = el.options[el.selectedIndex];
      item.value = sel ? clip(norm(sel.text)) : '';
      item.options = Array.from(el.options).slice(0, 30).map(o => clip(norm(o.text)));
    }
    out.push(item);
    d = depth + 1;
  }
  el.childNodes.forEach(c => {
    if (c.nodeType === 3 && mixed && norm(c.data)) {
      out.push({ref: null, depth: d, role: 'text', text: clip(norm(c.data))});
    }
    else if (c.nodeType === 1) walk(c, d, '');
  });
}
const root = opts.root ? document.querySelector(opts.root) : document.body;
if (root) walk(root, 0, '');
const se = document.scrollingElement || document.documentElement;
return {elements: out, nextRef: window.__arlNextRef, scrollY: Math.round(se.scrollTop),
        scrollMax: Math.max(0, Math.round(se.scrollHeight - se.clientHeight))};
"""


@dataclass(frozen=True)
class PageElement:
    """One shown element (or a ``text`` run when ``ref`` is None); fields as in the module docstring."""

    ref: int | None
    depth: int
    role: str
    text: str = ""
    id: str = ""
    cls: str = ""
    value: str | None = None
    type: str = ""
    checked: bool | None = None
    options: tuple[str, ...] = ()
    placeholder: str = ""
    focused: bool = False
    disabled: bool = False
    selected: bool = False

    @classmethod
    def from_js(cls, item: dict[str, Any]) -> PageElement:
        """Build one from the page script's dict (unknown keys are an error: TypeError)."""
        item = dict(item)
        item["options"] = tuple(item.get("options", ()))
        return cls(**item)

    def line(self) -> str:
        """The element's rendered line, without indentation. Never raises."""
        if self.ref is None:
            return f"text {json.dumps(self.text, ensure_ascii=False)}"
        kind = self.role + (f"#{self.id}" if self.id else f".{self.cls}" if self.cls else "")
        parts = [f"[{self.ref}] {kind}"]
        if self.text:
            parts.append(json.dumps(self.text, ensure_ascii=False))
        if self.type:
            parts.append(f"type={self.type}")
        if self.value is not None:
            parts.append(f"value={json.dumps(self.value, ensure_ascii=False)}")
        if self.checked is not None:
            parts.append(f"checked={str(self.checked).lower()}")
        if self.options:
            parts.append(f"options={json.dumps(list(self.options), ensure_ascii=False)}")
        if self.placeholder:
            parts.append(f"placeholder={json.dumps(self.placeholder, ensure_ascii=False)}")
        if self.disabled:
            parts.append("disabled")
        if self.selected:
            parts.append("(selected)")
        if self.focused:
            parts.append("(focused)")
        return " ".join(parts)


@dataclass(frozen=True)
class PageSnapshot:
    """The shown elements of a page, in document order, and the ref counter.

    Attributes:
        elements: the shown elements and text runs.
        next_ref: the ref the next new element will get (refs below it were shown once).
        scroll_y: the page's vertical scroll offset in CSS pixels.
        scroll_max: the largest vertical scroll offset (0: the page does not scroll).
    """

    elements: tuple[PageElement, ...]
    next_ref: int
    scroll_y: int = 0
    scroll_max: int = 0

    def render(self, max_lines: int = 200) -> str:
        """The page as text (module docstring), at most ``max_lines`` lines (a last line says
        how many were left out); a scroll line when the page scrolls. Never raises."""
        lines = ["  " * e.depth + e.line() for e in self.elements]
        if len(lines) > max_lines:
            lines = [*lines[:max_lines], f"… {len(lines) - max_lines} more lines not shown"]
        if self.scroll_max:
            lines.append(f"(page scrolled {self.scroll_y} of {self.scroll_max} px)")
        return "\n".join(lines) if lines else "(the page shows nothing)"

    def refs(self) -> list[int]:
        """The refs shown, in document order."""
        return [e.ref for e in self.elements if e.ref is not None]

    def get(self, ref: int) -> PageElement | None:
        """The element with ``ref``, or None."""
        return next((e for e in self.elements if e.ref == ref), None)

    def find(
        self, text: str | None = None, role: str | None = None, **attrs: Any
    ) -> list[PageElement]:
        """Shown elements (with a ref) whose text equals ``text``, role equals ``role`` and whose
        other fields equal ``attrs`` (e.g. ``id="subbtn"``), in document order."""
        found = []
        for e in self.elements:
            if e.ref is None or (text is not None and e.text != text):
                continue
            if role is not None and e.role != role:
                continue
            if all(getattr(e, k) == v for k, v in attrs.items()):
                found.append(e)
        return found


def take_snapshot(
    driver: Any,
    *,
    root: str | None = None,
    skip: Sequence[str] = (),
    reset_refs: bool = False,
    max_text: int = 80,
) -> PageSnapshot:
    """Run :data:`SNAPSHOT_JS` in ``driver``'s page and return the snapshot.

    Args:
        driver: a Selenium WebDriver.
        root: CSS selector of the element to walk (None: ``document.body``).
        skip: CSS selectors of subtrees to leave out (e.g. a benchmark's own widgets).
        reset_refs: forget every ref and start again at 1 (module docstring).
        max_text: characters kept of each text or value.

    Raises:
        selenium.common.WebDriverException: the page or the browser is gone.
    """
    data = driver.execute_script(
        SNAPSHOT_JS,
        {"root": root, "skip": list(skip), "resetRefs": reset_refs, "maxText": max_text},
    )
    return PageSnapshot(
        tuple(PageElement.from_js(item) for item in data["elements"]),
        int(data["nextRef"]),
        int(data["scrollY"]),
        int(data["scrollMax"]),
    )
