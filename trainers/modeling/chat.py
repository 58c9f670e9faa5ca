"""The Hermes-style ChatML chat template and rendering conversations through a tokenizer's template: shared by
training and evaluation, so both see one format. The messages it renders are the message model's play form
(transcript/messages.py `template_messages`: tool-call arguments as objects); tool calls in generated text are read by
transcript.toolcalls, the parser the environments execute. This module imports neither (the model-code-without-lake
contract): its callers hand it messages already in that form.

Format (Hermes-3): `<|im_start|>role\\n...<|im_end|>\\n`; tools listed as JSON inside `<tools></tools>` in the
system prompt; assistant tool calls as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`; tool
results as a `tool` turn wrapped in `<tool_response>`. `{% generation %}` markers cover everything the assistant
produces, including its closing `<|im_end|>`, so `return_assistant_tokens_mask` (and trl's assistant_only_loss)
give labels on exactly the assistant's tokens.
"""
from __future__ import annotations

from typing import Any

import orjson

TOOLS_PREAMBLE = (
    "You are a function calling AI model. You may call one or more functions to assist with the user query. "
    "Function signatures are within <tools></tools> XML tags:\\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\\n</tools>\\nFor each function call return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-dict>}\\n</tool_call>"
)

CHATML_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' and messages[0].content %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '" + TOOLS_PREAMBLE + "' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '" + TOOLS_POSTAMBLE + "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + (messages[0].content or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}{%- generation %}"
    "{%- if message.reasoning %}{{- '<think>\\n' + message.reasoning + '\\n</think>\\n' }}{%- endif %}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for tc in message.tool_calls or [] %}{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": ' + (tc.name | tojson) + ', \"arguments\": ' }}"
    "{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The tiny model's variant: the same ChatML turns and <tool_call> JSON, but each tool rendered as a one-line
# signature inside <tools> instead of its full JSON schema. For a from-scratch 2-layer model the ~390-token JSON
# tools block dilutes attention over the prompt and delays learning to copy names from the instruction (measured:
# trainers/README.md); a pretrained Hermes-3 keeps the full-JSON template above.
COMPACT_TOOLS = (
    "{%- for tool in tools %}{%- set f = tool.function if tool.function is defined else tool %}"
    "{{- '\\n' + f.name + '(' }}"
    "{%- for k, v in (f.get('parameters') or {}).get('properties', {}).items() %}"
    "{%- if not loop.first %}{{- ', ' }}{%- endif %}{{- k }}{%- endfor %}"
    "{{- ') ' + (f.get('description') or '') }}{%- endfor %}"
)
TINY_TEMPLATE = (
    CHATML_TEMPLATE
    .replace("'" + TOOLS_PREAMBLE + "'", "'Tools:\\n<tools>'")
    .replace("{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}", COMPACT_TOOLS)
    .replace("'" + TOOLS_POSTAMBLE + "<|im_end|>\\n'",
             "'\\n</tools>\\nCall a tool as <tool_call>\\n{\"name\": ..., \"arguments\": {...}}\\n</tool_call><|im_end|>\\n'")
)
assert TINY_TEMPLATE != CHATML_TEMPLATE and "tojson }}{%- endfor" not in TINY_TEMPLATE

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

def normalize_tools(tools: Any) -> list[dict] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        tools = orjson.loads(tools) if tools.strip() else None  # orjson bounds nesting: never a RecursionError
    return list(tools) if tools else None


def render(tok, messages: list[dict], tools: list[dict] | None, *, add_generation_prompt: bool) -> str:
    """A conversation as the tokenizer's chat template writes it (text)."""
    return tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt)


def prompt_ids(tok, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The token ids of a conversation plus the assistant's generation prompt."""
    return list(tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True,
                                        return_dict=True)["input_ids"])


def turn_continuation(tok, messages: list[dict], tools: list[dict] | None, new: int, end_of_turn: str) -> str:
    """The text the template puts after the assistant turn that precedes the last `new` messages: what comes
    after that turn's `end_of_turn` token, the `new` messages (tool turns), and the next generation prompt.

    A generating loop appends it to the tokens the model produced, so its prompt is the template's own
    rendering of the conversation, turn after turn, with no hand-written copy of the format."""
    before = render(tok, messages[:-new], tools, add_generation_prompt=False)
    after = render(tok, messages, tools, add_generation_prompt=True)
    end = before.rfind(end_of_turn)
    if not after.startswith(before) or end < 0:
        raise ValueError("the chat template does not extend a conversation by appending turns; a multi-turn "
                         "evaluation needs one that does")
    return before[end + len(end_of_turn):] + after[len(before):]


def has_generation_markers(template: str | None) -> bool:
    return bool(template) and "generation" in template and "endgeneration" in template
