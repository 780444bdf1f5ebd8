"""Request and response bodies. pydantic checks shapes and types (a violation is a 422);
what only setllm can judge (markup, duplicate options, lengths in tokens) is checked
later, with setllm's own one-line messages.

pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here must be importable at module level.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ..core.variants import VARIANTS
from ..readouts import DEFAULT_READOUT, READOUTS

ReadoutName = Literal[tuple(READOUTS)]  # type: ignore[valid-type]  # 422 names the choices
VariantName = Literal[tuple(VARIANTS)]  # type: ignore[valid-type]
SEED_MAX = 2**63 - 1  # what torch.Generator.manual_seed takes
PROMPT_HELP = 'a set prompt: markup text ("Q:\\n{{a\\n||b\\n}}Answer:") or a list of text and {"set": [...]} items'


def _prompt_form(value: Any) -> Any:
    """One clear message for a prompt of the wrong type (a union would list one per branch)."""
    if isinstance(value, (str, list)):
        return value
    raise ValueError(f"must be {PROMPT_HELP}")


MAX_STOPS = 16  # stop strings per request
MAX_STOP_CHARS = 256  # characters per stop string: each is looked for after every token


def stop_form(value: Any) -> Any:
    """OpenAI's ``stop``: a string, a list of strings or null, within the bounds above."""
    if not (value is None or isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value))):
        raise ValueError("must be a string or a list of strings")
    stops = [value] if isinstance(value, str) else value or []
    if len(stops) > MAX_STOPS:
        raise ValueError(f"at most {MAX_STOPS} stop strings, got {len(stops)}")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ValueError(f"a stop string has at most {MAX_STOP_CHARS} characters, got {max(len(s) for s in stops)}")
    return value


StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
# What stop_form takes, as the schema says it (one message where a union would list one per branch).
OpenAIStop = Annotated[Any, BeforeValidator(stop_form), WithJsonSchema({"anyOf": [
    {"type": "string", "maxLength": MAX_STOP_CHARS},
    {"type": "array", "items": {"type": "string", "maxLength": MAX_STOP_CHARS}, "maxItems": MAX_STOPS},
    {"type": "null"}]})]


PromptField = Annotated[Any, BeforeValidator(_prompt_form), Field(description=PROMPT_HELP)]


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
    max_new_tokens: int = 64
    temperature: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(default=0, ge=0, le=SEED_MAX)
    stop: list[StopString] = Field(default_factory=list, max_length=MAX_STOPS)
    stream: bool = Field(default=False, description="server-sent events: {\"text\": piece} as the text grows, then this "
                         "route's answer, then [DONE]")


class GenerateResponse(Reading):
    text: str


class AnswerRequest(Request):
    documents: list[str] = Field(min_length=1, description="the documents, read as a set")
    question: str
    max_new_tokens: int = 32


class AnswerResponse(Reading):
    answer: str = Field(description="generated greedily up to a newline, as SetLLM.answer")


class ErrorResponse(BaseModel):
    error: str = Field(description="one line naming the problem")


# The error shape of every endpoint, for the OpenAPI document.
ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 413, 422, 500, 503, 504)}
