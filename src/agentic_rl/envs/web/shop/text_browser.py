"""A text browser: the shop's real pages over HTTP, shown as the browser layer's compact text.

:class:`TextBrowser` fetches pages with a ``requests`` session (cookies, redirects), parses them
with BeautifulSoup (``html.parser``) and renders them as a
:class:`~agentic_rl.tools.browser.snapshot.PageSnapshot`: the same elements, refs, roles and
line format as the Chromium rendering of :func:`~agentic_rl.tools.browser.snapshot.take_snapshot`
(interactive elements and elements with text of their own; text mixed with elements as
``text "..."`` lines; refs start at 1 on each page load and stay with their element while the
page is shown). The actions have the browser layer's names and arguments
(:meth:`TextBrowser.click` ... :meth:`TextBrowser.scroll`), done the way a browser does them on
a page without scripts:

* ``click``: a link is followed (GET); a submit button submits its form (GET with the fields as
  the query, or POST form-encoded), the button's own name/value included; a checkbox or radio
  toggles; any element takes the focus.
* ``type``: sets a text field's value (and focuses it); ``select``: picks an option by its text,
  then by its value.
* ``press("Enter")``: in a focused text field, submits its form (implicit submission); on a
  focused link or button, clicks it. Other valid keys do nothing here (no scripts listen).
* ``scroll``: validated, then nothing changes: the whole page is always shown.

Errors raise (the executor makes them error observations): an unknown ref
(:class:`~agentic_rl.tools.browser.actions.UnknownRefError`), the wrong kind of element, an
unknown option or key (the valid ones are named).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from agentic_rl.tools.browser.actions import KEYS, UnknownRefError
from agentic_rl.tools.browser.snapshot import PageElement, PageSnapshot

__all__ = ["TextBrowser", "render_html"]

_ROLES = {"a": "link", "button": "button", "select": "combobox", "textarea": "textbox"}
_ROLES.update({"label": "label", "li": "listitem", "img": "img", "summary": "button"})
_ROLES.update({f"h{i}": "heading" for i in range(1, 7)})
_INTERACTIVE = {"a", "button", "input", "select", "textarea", "label", "summary"}
_SKIP = {"script", "style", "noscript", "option", "br", "template", "head", "title"}
_MODIFIERS = ("Control", "Ctrl", "Shift", "Alt", "Meta")
_BUTTON_TYPES = ("button", "submit", "reset", "image")


def _norm(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    return text[:limit] + "…" if len(text) > limit else text


def _role(el: Any) -> str:
    if el.name == "input":
        kind = el.get("type", "text").lower()
        if kind in ("checkbox", "radio"):
            return kind
        return "button" if kind in _BUTTON_TYPES else "textbox"
    if el.name == "select" and (el.has_attr("multiple") or int(el.get("size", 1) or 1) > 1):
        return "listbox"
    return _ROLES.get(el.name, el.name)


def _hidden(el: Any) -> bool:
    style = el.get("style", "").replace(" ", "").lower()
    return (
        el.name in _SKIP
        or el.has_attr("hidden")
        or "display:none" in style
        or (el.name == "input" and el.get("type", "").lower() == "hidden")
    )


def _options(el: Any) -> list[Any]:
    return el.find_all("option")


def _chosen(el: Any) -> Any:
    opts = _options(el)
    return next((o for o in opts if o.has_attr("selected")), opts[0] if opts else None)


def _fields(el: Any, item: dict[str, Any], limit: int) -> None:
    """The input/textarea/select fields of ``el``'s item (as the page script reads them)."""
    if el.name == "input":
        kind = el.get("type", "text").lower()
        if kind in ("checkbox", "radio"):
            item["checked"] = el.has_attr("checked")
        elif item["role"] == "textbox":
            item["value"] = _clip(el.get("value", ""), limit)
            if kind != "text":
                item["type"] = kind
        elif el.get("value"):
            item["text"] = _clip(el["value"], limit)
        if el.get("placeholder"):
            item["placeholder"] = _clip(el["placeholder"], limit)
    elif el.name == "textarea":
        item["value"] = _clip(el.get_text(), limit)
    elif el.name == "select":
        chosen = _chosen(el)
        item["value"] = _clip(_norm(chosen.get_text()), limit) if chosen else ""
        item["options"] = [_clip(_norm(o.get_text()), limit) for o in _options(el)[:30]]


def render_html(soup: Any, focus: int | None = None, max_text: int = 80) -> PageSnapshot:
    """Render a parsed page as a :class:`PageSnapshot`, giving refs (``data-arl-ref``) to new
    shown elements from the soup's counter (``soup["data-arl-next"]``, 1 on a fresh page).

    Args:
        soup: a BeautifulSoup document (its refs are written into it).
        focus: the focused ref, shown ``(focused)``.
        max_text: characters kept of each text or value.
    """
    from bs4 import NavigableString, Tag
    from bs4.element import Comment

    out: list[PageElement] = []
    body = soup.body or soup
    if "data-arl-next" not in soup.attrs:  # a page parsed anew: after the refs it already holds
        held = [int(t["data-arl-ref"]) for t in soup.find_all(attrs={"data-arl-ref": True})]
        soup.attrs["data-arl-next"] = str(max(held, default=0) + 1)
    next_ref = [int(soup.attrs["data-arl-next"])]

    def walk(el: Any, depth: int) -> None:
        if _hidden(el):
            return
        texts = [
            c for c in el.children if isinstance(c, NavigableString) and not isinstance(c, Comment)
        ]
        texts = [c for c in texts if _norm(str(c))]
        kids = [c for c in el.children if isinstance(c, Tag)]
        mixed = bool(texts and kids)
        own = "" if mixed else _norm(" ".join(str(t) for t in texts))
        shown = el.name in ("input", "select", "textarea") or el.name in _INTERACTIVE
        shown = shown or el.has_attr("onclick") or el.has_attr("tabindex")
        d = depth
        if el is not body and (own or shown):
            if not el.has_attr("data-arl-ref"):
                el["data-arl-ref"] = str(next_ref[0])
                next_ref[0] += 1
            ref = int(el["data-arl-ref"])
            classes = el.get("class") or [""]
            item: dict[str, Any] = {
                "ref": ref,
                "depth": depth,
                "role": _role(el),
                "text": _clip(own, max_text),
                "id": el.get("id", ""),
                "cls": classes[0] if not el.get("id") else "",
                "focused": ref == focus,
                "disabled": el.has_attr("disabled"),
            }
            _fields(el, item, max_text)
            out.append(PageElement.from_js(item))
            d = depth + 1
        for c in el.children:
            if isinstance(c, Tag):
                walk(c, d)
            elif mixed and not isinstance(c, Comment) and _norm(str(c)):
                out.append(PageElement(None, d, "text", _clip(_norm(str(c)), max_text)))

    walk(body, 0)
    soup.attrs["data-arl-next"] = str(next_ref[0])
    return PageSnapshot(tuple(out), next_ref[0])


class TextBrowser:
    """The shop's pages over HTTP as text (see the module docstring).

    Args:
        base_url: ``base_url() -> "http://127.0.0.1:<port>"`` (the env starts its server on the
            first call).
        timeout_s: seconds one HTTP request may take.
    """

    def __init__(self, base_url: Any, timeout_s: float = 10.0):
        import requests

        self._base_url = base_url
        self.timeout_s = float(timeout_s)
        self.session = requests.Session()
        self.session.trust_env = False  # never a proxy from the environment: 127.0.0.1 only
        self.soup: Any = None
        self.path = "/"
        self.status = 200
        self.focus: int | None = None

    # -- pages -----------------------------------------------------------------------------
    def _load(self, response: Any) -> None:
        parts = urlsplit(response.url)
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.status = int(response.status_code)
        self.set_page(self.path, response.text)

    def set_page(self, path: str, html: str, focus: int | None = None) -> None:
        """Show ``html`` as the page at ``path`` (refs already in it are kept)."""
        from bs4 import BeautifulSoup

        self.path, self.focus = path, focus
        self.soup = BeautifulSoup(html, "html.parser")
        self.snapshot()  # give the refs now, so actions find them

    def open(self, path: str) -> None:
        """Load the page at ``path`` (e.g. ``"/"``), refs from 1.

        Raises:
            requests.RequestException: the server did not answer.
        """
        self._load(self.session.get(urljoin(self._base_url(), path), timeout=self.timeout_s))

    def reset(self) -> None:
        """Forget cookies and open the home page (refs from 1).

        Raises:
            requests.RequestException: the server did not answer.
        """
        self.session.cookies.clear()
        self.open("/")

    def html(self) -> str:
        """The current page with its refs and field values, as HTML. Never raises."""
        return str(self.soup) if self.soup is not None else ""

    def snapshot(self) -> PageSnapshot:
        """The current page rendered (refs given to new elements)."""
        return render_html(self.soup, self.focus)

    def element(self, ref: Any) -> Any:
        """The element shown with ``ref``.

        Raises:
            UnknownRefError: no element has that ref on this page (the message lists the refs).
        """
        found = self.soup.find(attrs={"data-arl-ref": str(ref)}) if self.soup is not None else None
        if found is None:
            refs = ", ".join(map(str, self.snapshot().refs()[:40])) or "none"
            raise UnknownRefError(
                f"unknown ref {ref}: it is not on this page. Refs on the page: {refs}"
            )
        return found

    # -- forms -----------------------------------------------------------------------------
    @staticmethod
    def _is_submit(el: Any) -> bool:
        if el.name == "button":
            return el.get("type", "submit").lower() == "submit"
        return el.name == "input" and el.get("type", "").lower() in ("submit", "image")

    def _form_data(self, form: Any, submitter: Any) -> list[tuple[str, str]]:
        data = []
        for field in form.find_all(["input", "select", "textarea", "button"]):
            name = field.get("name")
            if not name or field.has_attr("disabled"):
                continue
            kind = field.get("type", "text").lower()
            if field.name == "button" or kind in _BUTTON_TYPES:
                if field is submitter:
                    data.append((name, field.get("value", "")))
            elif kind in ("checkbox", "radio"):
                if field.has_attr("checked"):
                    data.append((name, field.get("value", "on")))
            elif field.name == "select":
                chosen = _chosen(field)
                if chosen is not None:
                    data.append((name, chosen.get("value", _norm(chosen.get_text()))))
            elif field.name == "textarea":
                data.append((name, field.get_text()))
            else:
                data.append((name, field.get("value", "")))
        return data

    def submit(self, form: Any, submitter: Any = None) -> None:
        """Submit ``form`` as a browser does (module docstring) and load the answer.

        Raises:
            requests.RequestException: the server did not answer.
        """
        url = urljoin(urljoin(self._base_url(), self.path), form.get("action") or self.path)
        data = self._form_data(form, submitter)
        if form.get("method", "get").lower() == "post":
            response = self.session.post(url, data=data, timeout=self.timeout_s)
        else:
            url = url.split("?")[0]
            response = self.session.get(url, params=data, timeout=self.timeout_s)
        self._load(response)

    def form_action(self, ref: Any) -> str | None:
        """The ``data-action`` of the form that clicking ``ref`` would submit; None when the
        click submits no form, or one without it. Never raises."""
        try:
            el = self.element(ref)
        except (UnknownRefError, ValueError, TypeError):
            return None
        form = el.find_parent("form") if self._is_submit(el) else None
        return None if form is None else form.get("data-action")

    def enter_action(self) -> str | None:
        """The ``data-action`` of the form that pressing Enter would submit (module docstring);
        None when it submits none. Never raises."""
        if self.focus is None:
            return None
        try:
            el = self.element(self.focus)
        except UnknownRefError:
            return None
        if el.name == "input" and _role(el) == "textbox":
            form = el.find_parent("form")
            return None if form is None else form.get("data-action")
        return self.form_action(self.focus)

    # -- the actions -----------------------------------------------------------------------
    def click(self, ref: int) -> str:
        """Click the element ``ref`` (module docstring)."""
        el = self.element(ref)
        self.focus = ref
        if el.name == "a" and el.get("href"):
            url = urljoin(urljoin(self._base_url(), self.path), el["href"])
            self._load(self.session.get(url, timeout=self.timeout_s))
        elif self._is_submit(el) and el.find_parent("form") is not None:
            self.submit(el.find_parent("form"), el)
        elif _role(el) in ("checkbox", "radio"):
            if el.has_attr("checked"):
                del el["checked"]
            else:
                el["checked"] = ""
        return f"clicked [{ref}]"

    def type(self, ref: int, text: str) -> str:
        """Clear the text field ``ref`` and type ``text`` into it.

        Raises:
            ValueError: ``ref`` is not a text field.
        """
        el = self.element(ref)
        if _role(el) != "textbox":
            raise ValueError(f"[{ref}] is a <{el.name}>, not a text field; use click or select")
        if el.name == "textarea":
            el.string = text
        else:
            el["value"] = text
        self.focus = ref
        return f"typed {text!r} into [{ref}]"

    def press(self, key: str) -> str:
        """Press ``key`` on the focused element (module docstring).

        Raises:
            ValueError: an unknown key name (the valid ones are listed).
        """
        *mods, main = key.split("+") if len(key) > 1 else [key]
        if any(m not in _MODIFIERS for m in mods) or not (main in KEYS or len(main) == 1):
            raise ValueError(
                f"unknown key {key!r}: use one of {', '.join(KEYS)}, one character, or a chord "
                f"like Control+a (modifiers: {', '.join(_MODIFIERS)})"
            )
        if key == "Enter" and self.focus is not None:
            el = self.element(self.focus)
            form = el.find_parent("form")
            if _role(el) == "textbox" and el.name == "input" and form is not None:
                self.submit(form)
            elif el.name == "a" or self._is_submit(el):
                self.click(self.focus)
        return f"pressed {key}"

    def select(self, ref: int, option: str) -> str:
        """Choose ``option`` (its text, else its value) in the ``<select>`` ``ref``.

        Raises:
            ValueError: ``ref`` is not a select, or has no such option (the options are listed).
        """
        el = self.element(ref)
        if el.name != "select":
            raise ValueError(f"[{ref}] is a <{el.name}>, not a <select>; use click")
        opts = _options(el)
        texts = [_norm(o.get_text()) for o in opts]
        values = [o.get("value", t) for o, t in zip(opts, texts)]
        if option.strip() in texts:
            chosen = opts[texts.index(option.strip())]
        elif option in values:
            chosen = opts[values.index(option)]
        else:
            raise ValueError(f"[{ref}] has no option {option!r}; options: {texts}")
        for o in opts:
            if o.has_attr("selected"):
                del o["selected"]
        chosen["selected"] = ""
        self.focus = ref
        return f"selected {option!r} in [{ref}]"

    def scroll(self, target: str, direction: str) -> str:
        """Check the arguments; the whole page is always shown, so nothing moves.

        Raises:
            ValueError: a bad direction or target; UnknownRefError: an unknown ref.
        """
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"direction must be one of up, down, left, right, got {direction!r}")
        bare = str(target).strip().lstrip("[").rstrip("]")
        if target != "page" and not bare.isdigit():
            raise ValueError(f'target must be "page" or a ref number, got {target!r}')
        if target != "page":
            self.element(int(bare))
        return f"scrolled {target} {direction} (the whole page is shown)"

    def close(self) -> None:
        """Close the HTTP session. Idempotent; never raises."""
        self.session.close()
