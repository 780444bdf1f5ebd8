"""Request and response bodies. pydantic checks shapes and types (a violation is a 422);
what only setllm can judge (markup, duplicate options, lengths in tokens) is checked
later, with setllm's own one-line messages.

pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here must be importable at module level.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ..core.layout.variants import VARIANTS
from ..readouts import DEFAULT_READOUT, READOUTS

ReadoutName = Literal[tuple(READOUTS)]  # type: ignore[valid-type]  # 422 names the choices
VariantName = Literal[tuple(VARIANTS)]  # type: ignore[valid-type]
# The largest integer a request may give: the largest every JSON reader holds exactly (a
# double's 53 bits; JavaScript's Number.MAX_SAFE_INTEGER): a bound past it reads as another
# number, and so does a value a client sends.
INT_MAX = 2**53 - 1
SEED_MAX = INT_MAX


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema reads one: 3 and 3.0 are, true and "3" are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(ge: int | None = None, le: int = INT_MAX) -> Any:
    """An integer field from ``ge`` to ``le``, its schema stating those bounds (pydantic drops
    bounds that follow a validator from the schema, so they are written out here)."""
    schema = {"type": "integer", "maximum": le, **({"minimum": ge} if ge is not None else {})}
    return Annotated[int, BeforeValidator(_json_integer), Field(strict=True, ge=ge, le=le), WithJsonSchema(schema)]


Count = integer()
Count0 = integer(ge=0)  # also a seed (torch.Generator.manual_seed takes it)
Count1 = integer(ge=1)
TopLogprobs = integer(ge=0, le=5)
# The smallest top_p taken: sampling compares masses in float32, where a smaller one reads as 0
# and drops every token (the library's sampler then has nothing to draw from).
TOP_P_MIN = 1.1754943508222875e-38  # float32's smallest normal number
TEMPERATURE_MIN = 1e-6  # below it (0 aside) logits / temperature overflows float32 on the way: the sampler reads inf


def _temperature(value: float) -> float:
    if 0 < value < TEMPERATURE_MIN:
        raise ValueError(f"must be 0 (greedy) or at least {TEMPERATURE_MIN:g}")
    return value


def sampling_temperature(le: float) -> Any:
    """A sampling temperature: 0 (greedy) or from :data:`TEMPERATURE_MIN` to ``le``, as the schema says."""
    schema = {"anyOf": [{"type": "number", "const": 0}, {"type": "number", "minimum": TEMPERATURE_MIN, "maximum": le}]}
    return Annotated[float, Field(strict=True, ge=0, le=le, allow_inf_nan=False), AfterValidator(_temperature), WithJsonSchema(schema)]


OpenAITemperature = sampling_temperature(2)
Temperature = sampling_temperature(100)
Number = Annotated[float, Field(strict=True)]  # an int or a float; false is no number (as the schema says)
PROMPT_HELP = 'a set prompt: markup text ("Q:\\n{{a\\n||b\\n}}Answer:") or a list of text and {"set": [...]} items'


def _prompt_form(value: Any) -> Any:
    """One clear message for a prompt of the wrong type (a union would list one per branch);
    what a list holds is the library's to check (:func:`setllm.core.text.prompt.as_prompt`)."""
    if isinstance(value, (str, list)):
        return value
    raise ValueError(f"must be {PROMPT_HELP}")


PROMPT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [
    {"type": "string"}, {"type": "object", "properties": {"set": {"type": "array", "items": {"type": "string"}}}, "required": ["set"]}]}}]}


MAX_STOPS = 16  # stop strings per request
MAX_STOP_CHARS = 256  # characters per stop string: each is looked for after every token


def stop_form(value: Any) -> Any:
    """OpenAI's ``stop``: a string, a list of strings or null, within the bounds above."""
    if not (value is None or isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value))):
        raise ValueError("must be a string or a list of strings")
    stops = [value] if isinstance(value, str) else value or []
    if len(stops) > MAX_STOPS:
        raise ValueError(f"at most {MAX_STOPS} stop strings, got {len(stops)}")
    if any(not s for s in stops):  # "" is found at once: the answer would be "" while a stream sent text
        raise ValueError("a stop string must not be empty")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ValueError(f"a stop string has at most {MAX_STOP_CHARS} characters, got {max(len(s) for s in stops)}")
    return value


StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]
# What stop_form takes, as the schema says it (one message where a union would list one per branch).
OpenAIStop = Annotated[Any, BeforeValidator(stop_form), WithJsonSchema({"anyOf": [
    {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS},
    {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}, "maxItems": MAX_STOPS},
    {"type": "null"}]})]


PromptField = Annotated[Any, BeforeValidator(_prompt_form), WithJsonSchema(PROMPT_SCHEMA), Field(description=PROMPT_HELP)]


class Request(BaseModel):
    """setllm's own endpoints: strict types, unknown fields refused (a typo is not ignored)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    adapter: str | None = Field(default=None, description="which adapter reads the request (GET /v1/models lists them); "
                                "default: the main one (/v1/judge: the judge adapter, where the server holds one)")
    variant: VariantName | None = Field(default=None, description="how the prompt is read (mask + positions), e.g. causal-pe for "
                                        "the base model's reading; default: the adapter's own")


# What only setllm can judge of a value (a blank question or option, a duplicate, max_new_tokens
# below 1) is left to the library's request (setllm.verbs): the same words on every surface.
class ChooseRequest(Request):
    question: str
    options: list[str] = Field(min_length=2, description="the candidate answers, read as a set")
    context: str | None = None


class Reading(BaseModel):
    """Which reading answered, in every answer: the fields ``setllm choose --json`` gives."""

    model: str = Field(description="the base model served")
    adapter: str | None = Field(description="the adapter's folder (null: no adapter)")
    variant: str | None = Field(description="mask + positions the request was read under")


class ChooseResponse(Reading):
    answer: str
    index: int = Field(description="position of the answer in the request's options")
    scores: list[float] = Field(description="log-likelihood of each option, in the request's order")


class JudgeRequest(Request):
    instruction: str
    input: str | None = None
    candidates: list[str] = Field(min_length=2, description="the candidate responses, read as a set with identical, unnamed framing")
    readout: ReadoutName | None = Field(default=None, description="how scores are read (setllm.readouts); default: the one the "
                                       f"judge adapter was trained for, else {DEFAULT_READOUT}")


class JudgeResponse(Reading):
    best: int = Field(description="position of the best candidate in the request's list")
    ranking: list[int] = Field(description="all candidates, best first (positions in the request's list)")
    scores: list[float] = Field(description="each candidate's score under the readout (higher is better), in the request's order")


class ScoreRequest(Request):
    prompt: PromptField
    options: list[str] | None = Field(default=None, min_length=1, description="default: the elements of the prompt's only set")


class ScoreResponse(Reading):
    scores: list[float]


class GenerateRequest(Request):
    prompt: PromptField
    max_new_tokens: Count = 64  # below 1: the library's own 400
    temperature: Temperature = 0.0
    top_p: float = Field(default=1.0, ge=TOP_P_MIN, le=1, allow_inf_nan=False)
    seed: Count0 | None = 0
    stop: list[StopString] = Field(default_factory=list, max_length=MAX_STOPS)
    stream: bool = Field(default=False, description="server-sent events: {\"text\": piece} as the text grows, then this "
                         "route's answer, then [DONE]")


class GenerateResponse(Reading):
    text: str


class AnswerRequest(Request):
    documents: list[str] = Field(min_length=1, description="the documents, read as a set")
    question: str
    max_new_tokens: Count = 32


class AnswerResponse(Reading):
    answer: str = Field(description="generated greedily up to a newline, as SetLLM.answer")


class ErrorResponse(BaseModel):
    error: str = Field(description="one line naming the problem")


class OpenAIError(BaseModel):
    message: str = Field(description="one line naming the problem")
    type: str = Field(description="invalid_request_error, server_error or timeout")
    param: str | None = Field(description="the field at fault, where the problem is one field's")
    code: str | None = Field(description="model_not_found, invalid_api_key, or null")


class OpenAIErrorResponse(BaseModel):
    error: OpenAIError


# The statuses a request may get besides its answer: 400 what only setllm or this server's
# bounds refuse (markup, a blank or duplicate option, a --max-* flag), 401 no key, 404 a model
# or adapter not served, 408 a body sent too slowly, 413 a body or prompt too long, 422 what
# the schema refuses, 500 a bug, 503 a full queue or a stop, 504 --timeout-s.
STATUSES = (400, 401, 404, 408, 413, 422, 500, 503, 504)
ERRORS = {code: {"model": ErrorResponse} for code in STATUSES}  # setllm's routes
STREAMED = {200: {"content": {"text/event-stream": {"schema": {"description": "server-sent events (stream: true)"}}}}}
OPENAI_ERRORS = {**{code: {"model": OpenAIErrorResponse} for code in STATUSES}, **STREAMED}  # OpenAI's routes: its error object
