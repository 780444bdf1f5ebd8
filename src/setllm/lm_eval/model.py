"""The ``setllm`` model of lm-evaluation-harness: lm-eval's three request kinds answered by
setllm's own ladder, ``encode -> prefill -> score`` and ``prefill -> generate``.

A context that carries inline markup (``{{a||b||c}}``, :mod:`setllm.core.text.prompt`) is read as a set
prompt under the variant; any other context is plain text, tokenized exactly as lm-eval's
``--model hf`` tokenizes it (context and continuation joined, then split), so
``variant=causal-pe`` reproduces ``--model hf``. Requests that share a context are scored
from one prefill: its KV cache is gathered once per continuation.

Shapes: B contexts, R continuation rows (all continuations of the B contexts), L
continuation tokens, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm.auto import tqdm

from ..api import SCORING_WINDOW, SetLLM
from ..core.forward import generation, scoring
from ..core.model.fit import context_length
from ..core.text.prompt import parse_markup
from ..core.tokens.encoding import EncodedPrompt
from ..errors import InputError, OptionError, SetLLMWarning
from ..loading.options import LoadOptions
from ..loading.plan import plan_load
from ..loading.shipped import ADAPTERS_DIR
from ..loading.sources import DEFAULT_MODEL

# gen_kwargs setllm's decoder understands; anything else is refused rather than ignored.
GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p", "seed")


@dataclass(frozen=True)
class BackendOptions:
    """``--model_args`` of ``--model setllm`` (``key=value,key=value``): the fields of
    :class:`setllm.LoadOptions` but ``chat`` (lm-eval's ``--apply_chat_template`` asks for the
    template) and ``eos`` (below); ``pretrained`` is read as ``model``; lm-eval's
    ``--batch_size auto`` means 8. Plus how contexts are read.

    Attributes:
        load: which model, adapter and variant, as every surface loads them.
        eos: score each continuation followed by EOS. ``auto``: after set contexts (how
            Set-LLM adapters are trained and how ``setllm eval`` scores an option), not after
            plain ones (lm-eval's convention, so ``--model hf`` is reproduced).
        markup: read contexts containing ``{{`` as set markup (false: every context is plain text).
    """

    load: LoadOptions
    eos: bool | str = "auto"
    markup: bool = True

    @classmethod
    def parse(cls, args: dict) -> BackendOptions:
        """Options from lm-eval's parsed ``--model_args``; unknown keys are an error."""
        # lm-eval's command line hands values over as text ("8", "none", "true") where its
        # Python entry has parsed them already: read text the way lm-eval itself does.
        args = {k: lm_utils.handle_arg_string(v) if isinstance(v, str) else v for k, v in args.items()}
        args.pop("max_batch_size", None)  # lm-eval always passes it; batches here are fixed
        if "pretrained" in args and "model" not in args:  # --model hf's name for it
            args["model"] = args.pop("pretrained")
        if str(args.get("batch_size", "")).startswith("auto"):
            args["batch_size"] = 8
        if args.get("device") is None:
            args.pop("device", None)
        # eos is the backend's own rule; the chat template is lm-eval's --apply_chat_template.
        known = [f.name for f in dataclasses.fields(LoadOptions) if f.name not in ("eos", "chat")] + ["eos", "markup"]
        unknown = sorted(set(args) - set(known))
        if unknown:
            raise InputError(f"unknown --model_args key {unknown[0]!r} for --model setllm; known: {', '.join(known)}")
        eos, markup = args.pop("eos", "auto"), args.pop("markup", True)
        for key, value in (("eos", eos), ("markup", markup)):
            if not (isinstance(value, bool) or (key == "eos" and value == "auto")):
                raise InputError(f"--model_args {key} must be true or false{' or auto' if key == 'eos' else ''}, got {value!r}")
        try:
            return cls(LoadOptions(**args), eos, markup)
        except OptionError as e:
            raise e.named(lambda name: f"--model_args {name}") from None


DEFAULT_BATCH_SIZE = LoadOptions.batch_size  # contexts per batch when neither --model_args nor --batch_size names one


def run_name(model_args: str | dict) -> str:
    """The name lm-eval files a run under (its results' ``model_name`` and the ``--output_path``
    folder): ``MODEL/ADAPTER/VARIANT`` as the backend will load them (a shipped adapter by its
    folder's name), so runs of other adapters or readings never share a folder. lm-eval itself
    names a run by a ``pretrained=``/``model=`` key alone, else by a random id that is the same
    in every run (it seeds ``random``)."""
    args = lm_utils.simple_parse_args_string(model_args) if isinstance(model_args, str) else dict(model_args)
    plan = plan_load(BackendOptions.parse(args).load)
    adapter = plan.adapter
    if adapter is not None and Path(adapter).parent == ADAPTERS_DIR:
        adapter = Path(adapter).name
    return f"{plan.model or DEFAULT_MODEL}/{adapter or 'none'}/{plan.reading.variant}"


@register_model("setllm")
class SetLLMLM(TemplateLM):
    """lm-eval's ``LM`` on a :class:`setllm.SetLLM`.

    ``SetLLMLM(model=..., variant=..., ...)`` loads as ``--model_args`` would (see
    :class:`BackendOptions`); :meth:`wrap` takes a :class:`SetLLM` already loaded.
    """

    def __init__(self, **model_args):
        super().__init__()
        options = BackendOptions.parse(model_args)
        self._setup(SetLLM.load(options.load), options)

    @classmethod
    def wrap(cls, llm: SetLLM, eos: bool | str = "auto", markup: bool = True) -> SetLLMLM:
        """The backend on a loaded :class:`SetLLM` (its variant, exact mode and batch size)."""
        lm = cls.__new__(cls)
        TemplateLM.__init__(lm)
        options = BackendOptions(LoadOptions(variant=llm.variant.name, batch_size=llm.batch_size, exact=llm.exact), eos, markup)
        lm._setup(llm, options)
        return lm

    def _setup(self, llm: SetLLM, options: BackendOptions) -> None:
        self.llm, self.options = llm, options
        self.tokenizer = llm.tokenizer
        # One token of room: a window's last continuation token still goes through the model.
        self.max_length = (context_length(llm.model.config) or 2048) - 1

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> SetLLMLM:
        return cls.create_from_arg_obj(lm_utils.simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> SetLLMLM:
        # lm-eval passes --batch_size and --device on the side; a key in --model_args wins.
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        if str(extra.get("device", "")).startswith("cuda") and not torch.cuda.is_available():
            # lm-eval's command line defaults to --device cuda:0; where there is no GPU,
            # let setllm pick (as --model hf does). device=cuda in --model_args is an error.
            extra.pop("device")
        return cls(**{**extra, **arg_dict})

    # -- what lm-eval asks of a tokenizer-based LM ----------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        # The token an empty context is read as: BOS, else EOS (as --model hf).
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def device(self) -> torch.device:
        return self.llm.model.device

    def get_model_info(self) -> dict:
        """What lm-eval records in its results' ``config``: the reading that answered and the
        batch size it ran at (lm-eval's own ``batch_size`` there is the flag as given)."""
        origin = self.llm.origin
        return {"setllm": {"model": origin.model, "adapter": origin.adapter, "variant": self.llm.variant.name,
                           "exact": self.llm.exact, "batch_size": self.llm.batch_size}}

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """As ``--model hf``: the tokenizer's own special tokens, unless the text starts with BOS."""
        if add_special_tokens is None and self.tokenizer.bos_token and string.startswith(self.tokenizer.bos_token):
            add_special_tokens = False
        kw = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(string, **kw)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    # -- loglikelihood ----------------------------------------------------------------------
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(log P(continuation | context), is greedy)`` per ``(context, continuation)`` request."""
        pairs = [self._encode_pair_any(ctx, cont) for ctx, cont in (r.args for r in requests)]
        results = self._score(pairs, disable_tqdm)
        for req, res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return results

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """lm-eval's token-level entry: ``(key, context ids, continuation ids)``."""
        return self._score([(EncodedPrompt.plain(ctx), list(cont)) for _, ctx, cont in requests], disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole texts in disjoint windows, as ``--model hf`` (texts are plain)."""
        windows, owner = [], []
        for i, (text,) in enumerate(r.args for r in requests):
            rolling = lm_utils.get_rolling_token_windows(token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                                                         max_seq_len=self.max_length, context_len=1)
            for ctx, cont in map(lm_utils.make_disjoint_window, rolling):
                windows.append((EncodedPrompt.plain(ctx), list(cont)))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._score(windows, disable_tqdm)):
            totals[i] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def _encode_pair_any(self, context: str, continuation: str) -> tuple[EncodedPrompt, list[int]]:
        """Context and continuation ids: a set prompt for markup, ``--model hf``'s ids otherwise."""
        is_set = self._is_markup(context)
        if is_set:
            # Whitespace at the end of the context belongs to the continuation (as in lm-eval):
            # on its own it would be a token of its own that running text never has.
            stripped = context.rstrip()
            continuation, context = context[len(stripped):] + continuation, stripped
            # Each part is tokenized on its own, as setllm scores a response (setllm.core.tokens.codec).
            enc, cont = self.llm.encode(parse_markup(context)), self.llm.codec.tokenize(continuation)
        elif context == "":
            cont = self.tok_encode(continuation, add_special_tokens=False)
            ctx, cont = ([self.prefix_token_id], cont) if cont[:1] != [self.prefix_token_id] else (cont[:1], cont[1:])
            enc = EncodedPrompt.plain(ctx)
        else:
            ctx, cont = self._encode_pair(context, continuation)
            enc = EncodedPrompt.plain(ctx[-max(1, self.max_length - len(cont)):])  # left-truncated as --model hf does
        if not cont:
            raise InputError(f"the continuation {continuation!r} tokenizes to nothing")
        eos = self.options.eos if self.options.eos != "auto" else is_set
        return enc, cont + [self.eot_token_id] if eos and self.eot_token_id is not None else cont

    def _is_markup(self, context: str) -> bool:
        if "{{" in context and not self.options.markup:
            warnings.warn("markup=false: a context holding '{{' is read as plain text", SetLLMWarning, stacklevel=2)
        return self.options.markup and "{{" in context

    def _score(self, pairs: Sequence[tuple[EncodedPrompt, list[int]]], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Score every pair through the scoring driver, several batches of contexts per call
        (the driver packs them; pairs with the same context share one prefill)."""
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, (enc, _) in enumerate(pairs):
            groups[scoring.prompt_key(enc)].append(i)
        order = list(groups.values())
        results: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        window = self.llm.batch_size * SCORING_WINDOW
        for lo in tqdm(range(0, len(order), window), desc="setllm loglikelihood", unit="window", disable=disable_tqdm):
            chunk = order[lo : lo + window]
            requests = [self.llm.encoded_request(pairs[idx[0]][0], [pairs[i][1] for i in idx]) for idx in chunk]
            for idx, row in zip(chunk, self.llm.score_encoded(requests)):
                for i, score in zip(idx, row):
                    results[i] = (score.logprob, score.greedy)
        return results

    # -- generation -------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled) text for each ``(context, gen_kwargs)``, cut at ``until``."""
        by_kwargs: dict[str, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            by_kwargs[json.dumps(req.args[1], sort_keys=True, default=str)].append(i)
        out: list[str] = [""] * len(requests)
        size = self.llm.batch_size
        bar = tqdm(total=len(requests), desc="setllm generate_until", disable=disable_tqdm)
        for idx in by_kwargs.values():
            config = self._generation_config(requests[idx[0]].args[1])
            # each a checked request (the fit rule for it and its new tokens) before any forward
            encs = [self.llm.generate_request(self._encode_context(requests[i].args[0], config.max_new_tokens), config).prompt
                    for i in idx]
            for lo in range(0, len(idx), size):
                texts = [text for text, _ in self.llm.generate_encoded(encs[lo : lo + size], config)]
                for i, text in zip(idx[lo : lo + size], texts):
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(texts))
        bar.close()
        return out

    def _encode_context(self, context: str, room: int) -> EncodedPrompt:
        if self._is_markup(context):
            return self.llm.encode(parse_markup(context))
        ids = self.tok_encode(context)[-max(1, self.max_length - room):]  # left-truncated as --model hf does
        if not ids:
            raise InputError("generate_until: empty context")
        return EncodedPrompt.plain(ids)

    def _generation_config(self, gen_kwargs: dict) -> generation.GenerationConfig:
        """lm-eval's gen_kwargs as a :class:`GenerationConfig` (``--model hf``'s reading)."""
        kwargs = dict(gen_kwargs or {})
        unknown = sorted(set(kwargs) - set(GEN_KWARGS))
        if unknown:
            raise InputError(f"generate_until: gen_kwargs {unknown} are not supported by --model setllm (supported: {', '.join(GEN_KWARGS)})")
        until = kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        sample = bool(kwargs.get("do_sample", False)) and float(kwargs.get("temperature", 1.0) or 0) > 0
        return generation.GenerationConfig(
            max_new_tokens=int(kwargs.get("max_gen_toks", 256)),
            temperature=float(kwargs.get("temperature", 1.0)) if sample else 0.0,
            top_p=float(kwargs.get("top_p", 1.0) or 1.0),
            seed=kwargs.get("seed", 0),
            stop=[u for u in until if u],
        )

    def __repr__(self) -> str:
        return f"SetLLMLM({self.llm!r}, eos={self.options.eos!r}, markup={self.options.markup})"
