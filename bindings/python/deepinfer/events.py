"""The events a Request yields, one class per di_event_kind.

Every field is a copy made inside the library's callback (the C event and the
pointers read from it die when the callback returns), so an event object may be
kept, shared between threads and read at any time. Strings are ``str`` decoded
from the library's UTF-8; token ids are ``int``.

Every event but Done carries ``choice_index``: the choice it belongs to when a
Chat Completions request asks for ``n`` > 1 choices (the OpenAI API's
``choices[i].index``; di_event_choice_index), 0 for every other request. The
choices' events are interleaved in the order they are generated.
"""

from __future__ import annotations

import enum
import json as _json
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from ._errors import Status


class Finish(enum.IntEnum):
    """di_finish: why generation stopped."""

    STOP = 1  #: end of sequence, a stop token or a stop sequence
    LENGTH = 2  #: max_tokens or the context limit
    CONTENT_FILTER = 3
    UNKNOWN = 4

    def __str__(self) -> str:
        """The lower-case name, as Chat's finish_reason spells it ("stop",
        "length", "content_filter", "unknown"); repr() keeps Finish.STOP."""
        return self.name.lower()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @property
    def c_name(self) -> str:
        """The C enumerator, e.g. "DI_FINISH_STOP"."""
        return "DI_FINISH_" + self.name


class Encoding(enum.IntEnum):
    """di_encoding: the prompt encoding of protocol requests."""

    DSV4 = 1
    DSV41 = 2
    DSV3 = 3
    R1 = 4
    CHATML = 5  #: ChatML (SmolLM2, Qwen2 chat models), Hermes-style tool calls


class Protocol(enum.IntEnum):
    """di_protocol: the wire protocol of a protocol request."""

    CHAT = 1  #: OpenAI Chat Completions
    MESSAGES = 2  #: Anthropic Messages
    RESPONSES = 3  #: OpenAI Responses


@dataclass
class Tokens:
    """DI_EVENT_TOKENS: the token ids one step generated, in order (every output
    token, the end-of-sequence and stop tokens included).

    With log probabilities asked for (submit(logprobs=True), or a protocol body's
    Chat ``logprobs`` / Responses ``top_logprobs``), ``logprobs[i]`` is
    ``ids[i]``'s natural-log probability: the log-softmax of the model's raw
    logits at that position, before logit_bias, penalties, temperature, the
    grammar mask and top-k/top-p/min-p (di_event_logprobs; always <= 0). With
    ``top_logprobs`` k > 0, ``top_logprobs[i]`` lists the k most likely tokens at
    ids[i]'s position as (token id, log probability) pairs, most likely first, a
    tie to the lower id (di_event_top_logprobs); the sampled token is among them
    only when it is that likely. None when not asked for."""

    ids: List[int]
    choice_index: int = 0  #: the Chat choice (n > 1) these tokens belong to
    logprobs: Optional[List[float]] = None  #: one per id, or None
    #: one list of k (id, logprob) pairs per id, or None
    top_logprobs: Optional[List[List[Tuple[int, float]]]] = None


@dataclass
class Text:
    """DI_EVENT_TEXT: an answer text delta. Token requests: decoded output, UTF-8
    safe (a character split across tokens arrives whole). Protocol requests: the
    answer content as the stream parser separates it."""

    text: str
    choice_index: int = 0  #: the Chat choice (n > 1) this delta belongs to


@dataclass
class Reasoning:
    """DI_EVENT_REASONING: a reasoning text delta (reasoning_content) of a protocol
    request in thinking mode."""

    text: str
    choice_index: int = 0  #: the Chat choice (n > 1) this delta belongs to


@dataclass
class ToolCallDelta:
    """DI_EVENT_TOOL_CALL_DELTA: a piece of tool call `index`'s arguments JSON
    while it streams."""

    index: int  #: 0-based position of the call in the response (its choice's)
    id: Optional[str]  #: the call id ("call_…"), as the protocol chunks carry it
    name: Optional[str]  #: the function name the model wrote
    arguments_delta: str
    choice_index: int = 0  #: the Chat choice (n > 1) the call belongs to


@dataclass
class ToolCall:
    """DI_EVENT_TOOL_CALL: a complete tool call."""

    index: int
    id: Optional[str]
    name: Optional[str]
    arguments: str  #: the whole arguments JSON text, as the model wrote it
    choice_index: int = 0  #: the Chat choice (n > 1) the call belongs to

    def json(self):
        """The arguments parsed (json.loads). Raises json.JSONDecodeError when the
        model wrote arguments that are not JSON."""
        return _json.loads(self.arguments)


@dataclass
class Chunk:
    """DI_EVENT_CHUNK: a protocol chunk ready to send to a client."""

    json: Optional[str]  #: the chunk's JSON; None for Chat's closing "[DONE]"
    sse: str  #: the whole SSE message ("event: NAME\\n" when named, "data: …\\n\\n")
    name: Optional[str]  #: the SSE event name; None for Chat's unnamed events
    #: the Chat choice (n > 1) whose delta the chunk carries; 0 for the usage
    #: chunk and [DONE]
    choice_index: int = 0


@dataclass
class Done:
    """DI_EVENT_DONE: the terminal event, exactly one per request, always last.

    A failed or cancelled request is reported here (status not OK), not raised
    while iterating; Request.result() raises it."""

    status: Union[Status, int]  #: Status.OK when the request ran to its end
    message: str  #: why it ended ("" when it finished normally)
    finish_reason: Optional[Finish]  #: None when it did not finish (cancelled, failed)
    #: protocol requests: the protocol's reason ("stop", "length", "tool_calls", …);
    #: token requests: str(finish_reason) ("stop", "length"); None when unfinished
    finish_text: Optional[str]
    prompt_tokens: int  #: tokens of the prompt prefilled (after rendering)
    completion_tokens: int  #: tokens generated, end-of-sequence included
    reasoning_tokens: int  #: of those, inside the reasoning block (protocol requests)
    response_json: Optional[str]  #: finished protocol requests: the whole response
    #: of prompt_tokens, those the prefix cache held (not computed again)
    prompt_cache_hit_tokens: int = 0
    #: draft tokens speculative decoding verified (Engine(speculative_tokens=))
    draft_tokens: int = 0
    #: of them, those kept (each a decode step saved)
    accepted_draft_tokens: int = 0

    @property
    def ok(self) -> bool:
        """True when status is Status.OK."""
        return self.status == Status.OK

    def response(self):
        """response_json parsed, or None when there is none."""
        return None if self.response_json is None else _json.loads(self.response_json)


Event = Union[Tokens, Text, Reasoning, ToolCallDelta, ToolCall, Chunk, Done]
