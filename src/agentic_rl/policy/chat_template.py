"""Chat formats from the model's own Jinja chat template, kept token-in/token-out.

:class:`TemplateChatFormat` renders every environment span (system prompt, task, tool results,
feedback, the next assistant header) with the tokenizer's chat template, and never re-tokenizes
what the policy sampled. The span appended after a reply is a difference of two renderings (the
way verl and SkyRL derive observation tokens, here on the episode's own conversation instead of
a fixed stand-in): the template renders the whole conversation so far, the new assistant reply
and env messages included, with the generation prompt; the text the segment already holds (the
prompt and every reply as sampled, with the spans appended since) must be a prefix of it, and the
rest is the new span::

    view = template(conversation + [reply, *env_messages], add_generation_prompt=True)
    span = view[len(segment_text):]        # e.g. "\\n<|im_start|>user\\n<tool_response>…"

When the segment text is *not* a prefix of the view, the template shows the history differently
from how it was fed: most thinking templates drop the ``<think>…</think>`` of earlier replies, a
``| trim`` strips a reply's outer whitespace. The engine then starts a new segment whose prompt is
the view itself (a context rebuild, :mod:`agentic_rl.rollout.context`): the earlier segment is
trained as sampled, and the model sees later turns exactly as its template shows them.

Checked once per model (:meth:`TemplateChatFormat.verify`, run by the constructor): a probe
episode (system prompt with tools, task, replies with tool calls in the model's tool format, one
and two tool results, feedback, a final answer) is rendered span by span, and before every reply
the segment's ids must equal ``apply_chat_template(conversation, add_generation_prompt=True,
tokenize=True)`` token for token, with no context rebuild. A template that fails gets a
:class:`ChatTemplateError` naming the model and the reason (first differing token, or the turn
the template rewrote).

Adapting messages to what the template accepts (probed once):

* a template without a ``system`` role (it raises, or drops the text) gets the system prompt as
  the first paragraph of the first user message;
* a template without a ``tool`` role gets each tool result as a ``user`` message wrapped by the
  tool format (:meth:`~agentic_rl.tools.definition.formats.ToolFormat.wrap_result`), and
  consecutive user messages merged (templates that demand alternating roles);
* a template with a ``tools`` block gets the env's tool schemas through ``tools=`` and the
  system prompt without the env's own tool list, when that list is the one
  :func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt` wrote (recognised exactly);
  without a tools block, the list is rewritten with the model's call syntax.

Env text never makes a control token: in every message but the assistant's, each special token
of the tokenizer (``<|eot_id|>``, ``<start_of_turn>``…) is broken by a space before its last
character, as :mod:`agentic_rl.policy.chat` does for ChatML.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import Any

from agentic_rl.errors import AgenticRLError
from agentic_rl.policy.chat import IM_END, IM_START, ChatFormat
from agentic_rl.tools.definition.formats import (
    ToolFormat,
    convert_hermes_reply,
    detect_tool_format,
    get_tool_format,
)
from agentic_rl.tools.definition.prompt import (
    render_tool_system_prompt,
    split_tool_system_prompt,
)
from agentic_rl.types import Message, ToolCall

__all__ = [
    "AnyChatFormat",
    "CHAT_FORMATS",
    "chat_for_model",
    "ChatTemplateError",
    "TemplateChatFormat",
    "REASONING_MARKERS",
    "make_chat_format",
    "split_reasoning",
]

log = logging.getLogger(__name__)

#: (open, close) reasoning markers, looked for in a template's text
REASONING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("[THINK]", "[/THINK]"),
    ("<seed:think>", "</seed:think>"),
)
_PROBE = "Q7probe"


class ChatTemplateError(AgenticRLError):
    """A model's chat template cannot be used token-in/token-out (the message names the model)."""


def split_reasoning(text: str, markers: tuple[str, str] | None) -> tuple[str, str]:
    """``(reasoning, content)`` of a reply: the reasoning runs to the end of the last closing
    marker and the content is the rest without its leading whitespace; a reply with an opening
    marker and no closing one is all reasoning (a cut thought). Without markers (or none in the
    text) the reasoning is empty and the content is ``text``. Never raises."""
    if markers is None:
        return "", text
    opening, closing = markers
    end = text.rfind(closing)
    if end != -1:
        end += len(closing)
        return text[:end], text[end:].lstrip()
    if opening in text:
        return text, ""
    return "", text


class TemplateChatFormat:
    """A chat format rendered by a tokenizer's own chat template (module docstring).

    Args:
        tokenizer: a HF tokenizer with a ``chat_template``.
        model_name: names the model in errors (its path or id).
        tool_format: ``"auto"`` (read from the template,
            :func:`~agentic_rl.tools.definition.formats.detect_tool_format`) or a format name.
        template_kwargs: extra variables of the template (``enable_thinking``, ``date_string``…).

    Attributes:
        tool_format: the :class:`~agentic_rl.tools.definition.formats.ToolFormat` replies are
            parsed with.
        reasoning_markers: the template's ``(open, close)`` thinking markers, or None.
        eos_token_id: the id ending an assistant turn (the template's end-of-turn token).

    Raises:
        ChatTemplateError: no chat template, or one that cannot be split into turns
            (:meth:`verify`).
        ValueError: an unknown ``tool_format``.
    """

    def __init__(
        self,
        tokenizer: Any,
        model_name: str,
        tool_format: str = "auto",
        template_kwargs: dict[str, Any] | None = None,
    ):
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.template_kwargs = dict(template_kwargs or {})
        template = getattr(tokenizer, "chat_template", None)
        if not isinstance(template, str) or not template.strip():
            raise ChatTemplateError(f"model {model_name}: its tokenizer has no chat template")
        self.template = template
        name = detect_tool_format(template) if tool_format == "auto" else tool_format
        self.tool_format: ToolFormat = get_tool_format(name)
        self.reasoning_markers = next((m for m in REASONING_MARKERS if m[1] in template), None)
        self._probe_roles()
        self._probe_end_of_turn()
        self.verify()

    # --- probing -------------------------------------------------------------------------------

    def _fail(self, reason: str) -> ChatTemplateError:
        return ChatTemplateError(
            f"model {self.model_name}: its chat template cannot be used turn by turn: {reason}"
        )

    def _raw(self, messages: Sequence[dict[str, Any]], generation: bool, tools=None) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=generation,
            **self.template_kwargs,
        )

    def _renders(self, messages: Sequence[dict[str, Any]], needle: str, tools=None) -> bool:
        try:
            return needle in self._raw(messages, True, tools)
        except Exception:  # noqa: BLE001 - a template that raises (raise_exception) lacks the feature
            return False

    def _probe_roles(self) -> None:
        user = {"role": "user", "content": "U"}
        self.system_role = self._renders([{"role": "system", "content": _PROBE}, user], _PROBE)
        turns = [user, {"role": "assistant", "content": "A"}]
        self.tool_role = self._renders([*turns, {"role": "tool", "content": _PROBE}], _PROBE)
        probe_tool = {"type": "function", "function": {"name": _PROBE, "parameters": {}}}
        self.tools_block = self._renders([user], _PROBE, [probe_tool])
        if not self._renders([user], "U"):
            raise self._fail("it does not render a plain user message")

    def _probe_end_of_turn(self) -> None:
        user = {"role": "user", "content": "U"}
        try:
            text = self._raw([user, {"role": "assistant", "content": _PROBE}], False)
        except Exception as exc:  # noqa: BLE001 - reported with the model's name
            raise self._fail(f"rendering an assistant reply raised {exc}") from None
        after = text[text.rfind(_PROBE) + len(_PROBE) :]
        ids = self.encode(after)
        special = set(self.tokenizer.all_special_ids)
        if not ids or (ids[0] not in special and not self._is_added(ids[0])):
            raise self._fail(
                f"it ends an assistant reply with {after[:40]!r}, which does not start with a "
                "special token of the tokenizer (the policy needs one end-of-turn token to stop on)"
            )
        self.eos_token_id: int = int(ids[0])
        self.end_of_turn = self.decode(ids[:1])
        self.after_end = after.split(self.end_of_turn, 1)[1]
        prompt = self._raw([user], True)
        header = prompt[prompt.rfind("U") + 1 :]
        opening, closing = self.reasoning_markers or ("", "")
        #: the generation prompt opens a thought (QwQ, newer R1 distills): replies close it; an
        #: empty thought prefilled whole (``<think>\n</think>``) leaves replies plain. Either way
        #: the template never shows the prefilled part again: every later turn is a new segment.
        self.prefills_thinking = bool(opening) and opening in header
        self._closes_prefill = self.prefills_thinking and closing not in header

    def _is_added(self, token_id: int) -> bool:
        return token_id in getattr(self.tokenizer, "added_tokens_decoder", {})

    # --- text and ids --------------------------------------------------------------------------

    @functools.cached_property
    def _specials(self) -> re.Pattern[str] | None:
        added = getattr(self.tokenizer, "added_tokens_decoder", {}).values()
        names = {t.content for t in added if getattr(t, "special", False)}
        names |= set(self.tokenizer.all_special_tokens)
        names = {n for n in names if len(n) > 1 and not any(c.isspace() for c in n)}
        if not names:
            return None
        return re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))

    def sanitize(self, text: str) -> str:
        """``text`` with every special-token string broken by a space before its last character."""
        pattern = self._specials
        if pattern is None:
            return text
        return pattern.sub(lambda m: m.group(0)[:-1] + " " + m.group(0)[-1], text)

    def encode(self, text: str) -> list[int]:
        """Tokenize one rendered span as ``apply_chat_template(tokenize=True)`` does (no BOS or
        EOS added; special-token strings, the template's own, become their ids)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids exactly (special tokens kept, no whitespace clean-up)."""
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    # --- rendering -----------------------------------------------------------------------------

    def _system(self, content: str, tools: Sequence[dict[str, Any]]) -> tuple[str, bool]:
        """The system text to render and whether the template lists the tools itself."""
        split = split_tool_system_prompt(content, tools)
        if split is None:
            return content, False
        instructions, style = split
        if self.tools_block:
            return instructions, True
        header = self.tool_format.tools_header()
        return render_tool_system_prompt(instructions, tools, style, header), False

    def adapt(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """``(template messages, template tools)`` for ``messages`` (rules: module docstring)."""
        out: list[dict[str, Any]] = []
        listed = False
        for m in messages:
            role, content = m.role, m.content
            if role == "system":
                content, listed = self._system(content, tools)
            if role != "assistant":
                content = self.sanitize(content)
            if role == "tool" and not self.tool_role:
                role, content = "user", self.tool_format.wrap_result(content)
            if role == "system" and not self.system_role:
                role = "user"
            if out and role == "user" and out[-1]["role"] == "user" and not self.tool_role:
                out[-1]["content"] += "\n\n" + content
                continue
            out.append({"role": role, "content": content})
        if not self.system_role and len(out) > 1 and messages and messages[0].role == "system":
            first, second = out[0], out[1]
            if second["role"] == "user":
                out[:2] = [
                    {"role": "user", "content": f"{first['content']}\n\n{second['content']}"}
                ]
        template_tools = (
            [{"type": "function", "function": dict(t)} for t in tools] if listed else None
        )
        return out, template_tools

    def render_prompt(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
    ) -> str:
        """The template's text of ``messages`` with the generation prompt (a segment's prompt)."""
        adapted, template_tools = self.adapt(messages, tools)
        return self._raw(adapted, True, template_tools)

    def next_context(
        self,
        conversation: Sequence[Message],
        segment_text: str,
        tools: Sequence[dict[str, Any]] = (),
    ) -> str | None:
        """The span to append after a reply, or None when the template rewrote the history.

        Args:
            conversation: the messages since the segment's last reset, ending with the reply
                (as sampled) and the env's new messages.
            segment_text: the text the segment holds: its prompt, the replies as sampled (with
                their end-of-turn token when sampled) and the spans appended since.
        """
        view = self.render_prompt(conversation, tools)
        return view[len(segment_text) :] if view.startswith(segment_text) else None

    def render_assistant_reply(self, text: str) -> str:
        """A scripted reply (Hermes calls rewritten in the model's format) and its end-of-turn token."""
        return convert_hermes_reply(text, self.tool_format) + self.end_of_turn

    def parse_tool_calls(self, text: str, turn_index: int = 0):
        """The tool calls of a reply's content, parsed in the model's tool format."""
        return self.tool_format.parse(text, turn_index)

    def split_reasoning(self, text: str) -> tuple[str, str]:
        """``(reasoning, content)`` of a reply (:func:`split_reasoning` with the template's markers)."""
        return split_reasoning(text, self.reasoning_markers)

    # --- the check -----------------------------------------------------------------------------

    def _probe_episode(self) -> tuple[list[Message], list[list[Message]], list[str], list[dict]]:
        schema = {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        }
        write = self.tool_format.write_calls
        call = functools.partial(ToolCall, "calculator")
        replies = [
            write([call({"expression": "17 * 23"})]),
            write([call({"expression": "391 + 9"}), call({"expression": "400 / 8"})]),
            "17 * 23 = 391, plus 9 is 400, and 400 / 8 = 50.",
            "Yes, 400 / 8 = 50.",
        ]
        if self._closes_prefill:  # what a model writes after the prefilled opening marker
            closing = self.reasoning_markers[1]  # type: ignore[index]
            replies = [f"I use the tool.\n{closing}\n\n{r}" for r in replies]
        system = render_tool_system_prompt("You solve arithmetic with the calculator.", [schema])
        start = [Message("system", system), Message("user", "What is (17 * 23 + 9) / 8?")]
        after = [
            [Message("tool", "391")],
            [Message("tool", "400"), Message("tool", "50.0")],
            [Message("user", "Are you sure? Check it once more.")],
            [],
        ]
        return start, after, replies, [schema]

    def verify(self) -> None:
        """Render the probe episode span by span and compare it with the whole-conversation
        rendering before every reply (module docstring).

        Raises:
            ChatTemplateError: a token differs, or the template rewrote an earlier turn.
        """
        conversation, after, replies, tools = self._probe_episode()
        text = self.render_prompt(conversation, tools)
        ids = self.encode(text)
        for turn, (reply, env_messages) in enumerate(zip(replies, after)):
            self._compare(ids, conversation, tools, turn)
            conversation = [*conversation, Message("assistant", reply), *env_messages]
            ids = ids + self.encode(reply) + [self.eos_token_id]
            text = text + reply + self.end_of_turn
            if not env_messages:
                break
            span = self.next_context(conversation, text, tools)
            if span is not None:
                ids, text = ids + self.encode(span), text + span
            elif self.prefills_thinking:  # the template drops the thought: a new segment
                text = self.render_prompt(conversation, tools)
                ids = self.encode(text)
            else:
                raise self._fail(
                    f"turn {turn + 1}: rendering the conversation with the next messages rewrites "
                    "an earlier turn (the text fed so far is not a prefix of the new rendering)"
                )

    def _compare(self, ids: list[int], conversation, tools, turn: int) -> None:
        adapted, template_tools = self.adapt(conversation, tools)
        whole = self.tokenizer.apply_chat_template(
            adapted,
            tools=template_tools,
            tokenize=True,
            add_generation_prompt=True,
            **self.template_kwargs,
        )
        whole = list(whole["input_ids"] if hasattr(whole, "keys") else whole)
        if whole == ids:
            return
        at = next(
            (i for i, (a, b) in enumerate(zip(ids, whole)) if a != b), min(len(ids), len(whole))
        )
        raise self._fail(
            f"before reply {turn + 1} the spans give {len(ids)} tokens and the whole conversation "
            f"{len(whole)}; they differ from token {at}: spans {self.decode(ids[at : at + 8])!r} vs "
            f"whole {self.decode(whole[at : at + 8])!r}"
        )


#: the values of ``model.chat_format``
CHAT_FORMATS = ("auto", "chatml", "template")


def _renders_as_chatml(tokenizer: Any, kwargs: dict[str, Any]) -> bool:
    """True when the tokenizer's template renders a conversation exactly as ChatML does."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return True  # no template: ChatML is the format the vocabulary's markers imply
    probe = [
        Message("system", "S"),
        Message("user", "U"),
        Message("assistant", "A"),
        Message("tool", "T"),
        Message("user", "V"),
    ]
    try:
        text = tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in probe],
            tokenize=False,
            add_generation_prompt=True,
            **kwargs,
        )
    except Exception:  # noqa: BLE001 - a template that raises is not plain ChatML
        return False
    return text == ChatFormat(None).render_prompt(probe)


def make_chat_format(
    tokenizer: Any,
    model_name: str,
    chat_format: str = "auto",
    tool_format: str = "auto",
    template_kwargs: dict[str, Any] | None = None,
) -> ChatFormat | TemplateChatFormat:
    """The chat format of a model (``model.chat_format``, ``model.tool_format``).

    ``auto``: the ChatML fast path (:class:`~agentic_rl.policy.chat.ChatFormat`, identical
    tokens to the hand-written renderer) when the vocabulary has ``<|im_start|>``/``<|im_end|>``
    and the template renders a conversation with a tool message exactly as ChatML (SmolLM2),
    else :class:`TemplateChatFormat` (Qwen's, Llama's, Gemma's templates…). ``chatml`` and
    ``template`` force one.

    Raises:
        ChatTemplateError: the model has neither ChatML tokens nor a usable template (the
            message names the model and the reason).
        ValueError: an unknown ``chat_format`` or ``tool_format``.
    """
    if chat_format not in CHAT_FORMATS:
        raise ValueError(f"chat format must be one of {CHAT_FORMATS}, got {chat_format!r}")
    kwargs = dict(template_kwargs or {})
    vocab = tokenizer.get_vocab()
    chatml_tokens = IM_START in vocab and IM_END in vocab
    if chat_format == "chatml" and not chatml_tokens:
        raise ChatTemplateError(
            f"model {model_name}: model.chat_format = 'chatml' but its vocabulary has no "
            f"{IM_START}/{IM_END} tokens"
        )
    if chat_format == "chatml" or (
        chat_format == "auto" and chatml_tokens and _renders_as_chatml(tokenizer, kwargs)
    ):
        name = "hermes" if tool_format == "auto" else tool_format
        return ChatFormat(tokenizer, get_tool_format(name))
    return TemplateChatFormat(tokenizer, model_name, tool_format, kwargs)


#: what the rollout engine takes as its chat format
AnyChatFormat = ChatFormat | TemplateChatFormat


def chat_for_model(tokenizer: Any, model_config: Any, name: str | None = None) -> AnyChatFormat:
    """:func:`make_chat_format` with a ``[model]`` section's ``chat_format``, ``tool_format``
    and ``chat_template_kwargs``; the model is named ``name`` (default ``model_config.path``).

    Raises:
        ChatTemplateError: as :func:`make_chat_format`.
    """
    return make_chat_format(
        tokenizer,
        str(model_config.path if name is None else name),
        model_config.chat_format,
        model_config.tool_format,
        model_config.chat_template_kwargs,
    )
