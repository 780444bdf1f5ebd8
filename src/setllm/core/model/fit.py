"""The fit rule: whether a prompt and its response fit a model's context, counted in
positions (:func:`check_fits`, before any forward; :func:`check_length`, the guard of every
forward), and the sliding windows of the model's layers it counts with.

Every surface applies this one rule: the codec, the scoring driver, decoding, the server and
the CLI's checks of a file's rows.
"""

from __future__ import annotations

from ..layout.positions import response_position
from ..text.prompt import PromptTooLong
from .families import SUPPORTED_MODEL_TYPES


def sliding_window(config) -> int | None:
    """The window of the model's sliding-attention layers, or None if all layers attend fully."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def layer_windows(config) -> dict[str, int | None]:
    """Each attention layer type's window (None: full attention). One entry when every layer
    is alike (Mistral and Phi-3 slide in every layer and name no types); Gemma 2/3 and Qwen
    with sliding layers have two, and take a mask per type as a dict keyed by these names."""
    window = sliding_window(config)
    types = getattr(config, "layer_types", None) or ["sliding_attention" if window else "full_attention"]
    return {t: window if t == "sliding_attention" else None for t in dict.fromkeys(types)}


def check_fits(config, tokens: int, end: int, scheme: str, response: int = 0, what: str = "response") -> None:
    """The fit rule, the one every surface applies (the codec, the scoring driver, decoding,
    the server, the CLI's checks of a file's rows): a prompt of ``tokens`` tokens whose
    response starts at position ``end`` (:meth:`setllm.core.tokens.encoding.EncodedPrompt.positions`),
    plus ``response`` tokens of response (at least one: the first is read from the prompt's
    last token), fits the context, counted in positions (see :func:`check_length`). Under NoPE
    the response stays at position 0 with the prompt; under SBP the text after a set resumes
    after its longest element: there the tokens outrun the positions, and only the positions
    count. Raises :class:`PromptTooLong` naming ``what`` the response is."""
    steps = response_position(scheme, 0, max(response, 1) - 1) + 1  # positions the response takes
    at = "" if end == tokens else f" at positions up to {max(end - 1, 0)}"
    alone = _too_long(config, tokens + 1, end + 1)  # the prompt leaves no room for a response
    if alone or not response:
        if alone:
            raise PromptTooLong(f"prompt is {tokens} tokens{at}, {alone}")
        return
    problem = _too_long(config, tokens + response, end + steps)
    if problem:
        raise PromptTooLong(f"prompt ({tokens} tokens{at}) + {what} ({response}) is {problem}")


def check_length(config, length: int, positions: int | None = None) -> None:
    """``length`` tokens whose position ids stay below ``positions`` (default: ``length``):
    the guard of every forward (a prompt and its response are checked before, by
    :func:`check_fits`).

    The context counts positions: in every supported family the context is what the
    positions were trained on (RoPE's range, gpt2's table of ``n_positions`` embeddings).
    Under SetPE the text after a set resumes at the set's start + its tokens, so the two
    counts differ only where positions stop growing with tokens: NoPE (all 0), SBP (after a
    set, its start + its longest element) and a prompt that ends inside a set. Sliding
    windows are no limit in the supported families: the masks apply them in positions
    (:func:`setllm.core.layout.masks.window_mask`). A model of another family (``allow_untested``)
    may not take a mask per layer type, so there a window still bounds the tokens, as it
    bounded every model before set-aware windows.
    """
    used = length if positions is None else positions
    problem = _too_long(config, length, used)
    if problem:
        at = "" if used == length else f" at positions up to {used - 1}"
        raise PromptTooLong(f"sequence of {length} tokens{at} is {problem}")


def _too_long(config, tokens: int, positions: int) -> str | None:
    """Why ``tokens`` tokens at positions below ``positions`` do not fit ``config``'s model
    ("longer than ..."), or None."""
    window = sliding_window(config)
    if window is not None and tokens > window and getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return (f"longer than the model's sliding attention window ({window}), "
                f"and setllm applies set-aware windows only in the families it verified ({', '.join(SUPPORTED_MODEL_TYPES)})")
    limit = context_length(config)
    if limit is not None and positions > limit:
        return f"longer than the model's context ({limit} tokens)"
    return None


def context_length(config) -> int | None:
    """Most tokens the model takes (gpt2 names it ``n_positions``)."""
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)

