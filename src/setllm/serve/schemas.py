"""Request and response bodies. pydantic checks shapes and types (a violation is a 422);
what only setllm can judge (markup, duplicate options, lengths in tokens) is checked
later, with setllm's own one-line messages.

pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here must be importable at module level.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..readouts import DEFAULT_READOUT, READOUTS

ReadoutName = Literal[tuple(READOUTS)]  # type: ignore[valid-type]  # 422 names the choices
SEED_MAX = 2**63 - 1  # what torch.Generator.manual_seed takes
PROMPT_HELP = 'a set prompt: markup text ("Q:\\n{{a\\n||b\\n}}Answer:") or a list of text and {"set": [...]} items'


def _prompt_form(value: Any) -> Any:
    """One clear message for a prompt of the wrong type (a union would list one per branch)."""
    if isinstance(value, (str, list)):
        return value
    raise ValueError(f"must be {PROMPT_HELP}")


def _stop_form(value: Any) -> Any:
    if value is None or isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value)):
        return value
    raise ValueError("must be a string or a list of strings")


def _completion_prompt(value: Any) -> Any:
    """OpenAI's four prompt forms: a string, a list of strings, token ids, a list of those."""
    def ids(v):
        return isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)

    if isinstance(value, str) or ids(value):
        return value
    if isinstance(value, list) and value and (all(isinstance(s, str) for s in value) or all(ids(v) for v in value)):
        return value
    raise ValueError("must be a string (setllm markup allowed), a list of strings, a list of token ids, or a list of those")


PromptField = Annotated[Any, BeforeValidator(_prompt_form), Field(description=PROMPT_HELP)]


class Request(BaseModel):
    """setllm's own endpoints: strict types, unknown fields refused (a typo is not ignored)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ChooseRequest(Request):
    question: str = Field(min_length=1)
    options: list[str] = Field(min_length=2, description="the candidate answers, read as a set")
    context: str | None = None


class ChooseResponse(BaseModel):
    answer: str
    index: int = Field(description="position of the answer in the request's options")
    scores: list[float] = Field(description="log-likelihood of each option, in the request's order")


class JudgeRequest(Request):
    instruction: str = Field(min_length=1)
    input: str | None = None
    candidates: list[str] = Field(min_length=2, description="the candidate responses, read as a set with identical, unnamed framing")
    readout: ReadoutName | None = Field(default=None, description="how scores are read (setllm.readouts); default: the one the "
                                       f"judge adapter was trained for, else {DEFAULT_READOUT}")


class JudgeResponse(BaseModel):
    best: int = Field(description="position of the best candidate in the request's list")
    ranking: list[int] = Field(description="all candidates, best first (positions in the request's list)")
    scores: list[float] = Field(description="each candidate's score under the readout (higher is better), in the request's order")


class ScoreRequest(Request):
    prompt: PromptField
    options: list[str] | None = Field(default=None, min_length=1, description="default: the elements of the prompt's only set")


class ScoreResponse(BaseModel):
    scores: list[float]


class GenerateRequest(Request):
    prompt: PromptField
    max_new_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(default=0, ge=0, le=SEED_MAX)
    stop: list[str] = Field(default_factory=list, max_length=16)


class GenerateResponse(BaseModel):
    text: str


class CompletionRequest(BaseModel):
    """OpenAI's ``POST /v1/completions``: unknown fields are ignored as OpenAI clients send
    more than we use; fields we cannot honour are refused with a 400 (see routes)."""

    model_config = ConfigDict(extra="ignore")

    prompt: Annotated[Any, BeforeValidator(_completion_prompt)]
    model: str | None = None
    max_tokens: int | None = Field(default=16, ge=0)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    n: int = 1
    stop: Annotated[Any, BeforeValidator(_stop_form)] = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stream: bool = False
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    best_of: int | None = None
    suffix: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy ``logprobs``: per token its text, log-prob (None where not defined:
    the first token, and inside a set prompt; see docs/serving.md), the likeliest tokens at
    its place and its offset in the text of the tokens."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ChatRequest(BaseModel):
    """OpenAI's ``POST /v1/chat/completions``: unknown fields are ignored (clients send more
    than we use); fields we cannot honour are refused with a 400 naming them (see routes).
    ``{{a||b}}`` markup in a message's content makes a set."""

    model_config = ConfigDict(extra="ignore")

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    n: int = 1
    stop: Annotated[Any, BeforeValidator(_stop_form)] = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    tools: list | None = None
    response_format: dict | None = None
    user: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class ChatResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ErrorResponse(BaseModel):
    error: str = Field(description="one line naming the problem")

