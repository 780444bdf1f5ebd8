"""The ladder's plain values, apart from its tensors: how to decode (:class:`GenerationConfig`)
and one option's score (:class:`OptionScore`). No torch here, so the verbs, the server's
request bodies, the CLI's flags and the Ray ingress name them without loading it;
:mod:`.generation` and :mod:`.scoring` use them and export them under their old names."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InputError


@dataclass
class GenerationConfig:
    """How to decode.

    Attributes:
        max_new_tokens: upper bound on generated tokens per prompt.
        temperature: 0 decodes greedily; > 0 samples from ``softmax(logits / temperature)``.
        top_p: nucleus sampling: keep the smallest set of tokens with this much probability.
        seed: seed for sampling (same seed, same text).
        stop: strings that end generation; the stop string is cut from the text.
    """

    max_new_tokens: int = field(default=64, metadata={"help": "most tokens to generate", "metavar": "N"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy; > 0 samples", "metavar": "T"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass", "metavar": "P"})
    seed: int | None = field(default=0, metadata={"help": "sampling seed", "metavar": "S"})
    stop: list[str] = field(default_factory=list, metadata={"help": "stop at any of these strings", "metavar": "TEXT"})

    def __post_init__(self):
        if isinstance(self.stop, str):
            raise InputError("stop must be a list of strings, e.g. stop=[\"\\n\"]")
        self.stop = list(self.stop)
        if "" in self.stop:  # the empty string is at every place: it would stop before the first token
            raise InputError("stop strings must be non-empty (an empty one would end every answer before it starts)")
        if self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class OptionScore:
    """Log-likelihood of one option as the response.

    Attributes:
        text: the option.
        logprob: sum of token log-probabilities.
        mean_logprob: ``logprob / n_tokens``, comparable across options of different length.
        n_tokens: number of tokens of the option.
    """

    text: str
    logprob: float
    mean_logprob: float
    n_tokens: int
