"""Tiny deterministic models and tokenizers for tests: built from configs, no downloads.

``tiny_tokenizer()`` is a byte-level BPE trained on a fixed corpus; ``tiny_sp_tokenizer()``
a SentencePiece-style (Metaspace, prefix space) one. ``tiny_model(arch)`` is a 2-layer
random model of each supported architecture, seeded.
"""

from __future__ import annotations

import copy
import functools

import torch

ARCHS = ("llama", "gemma", "gemma2", "gemma3_text", "qwen2", "qwen3", "mistral", "phi3", "gpt2")

_CORPUS = [
    "Question: Which city is the capital of France?\n\nChoices:\nBudapest\nParis\nZurich\nAnswer: Paris",
    "Question: What do plants need to make food?\n\nChoices:\nsunlight\nsoil\nrocks\nAnswer: sunlight",
    "Context: Remy went to the store.\nQuestion: Why did Remy do this?\nAnswer: to buy milk",
    "The quick brown fox jumps over the lazy dog. Water boils at 100 degrees.",
    "apple banana cherry date elderberry fig grape. One two three four five six seven.",
]
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@functools.lru_cache(maxsize=None)
def _backend(kind: str):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif kind == "sp":  # Metaspace pre-tokenizer, like Mistral / Llama-2 converted with legacy=False
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        newline = pre_tokenizers.Split("\n", behavior="isolated")  # SentencePiece pieces never span a newline
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"), newline])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        alphabet = sorted(set("".join(_CORPUS)) | {"▁"})
    else:  # "sp_legacy": a Prepend("▁") normalizer, like the legacy Llama-2 tokenizer.json
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        words = pre_tokenizers.Split("▁", behavior="merged_with_next")  # pieces never span words
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="isolated"), words])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
        alphabet = sorted(set("".join(_CORPUS)) | {"▁"})
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer)
    return tok


def tiny_tokenizer(kind: str = "bpe", bos: bool = False):
    """A fresh fast tokenizer; ``bos=True`` makes it prepend ``<s>`` like Llama's."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = copy.deepcopy(_backend(kind))
    if bos:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_config(arch: str, vocab_size: int = 400, **overrides):
    from transformers import AutoConfig

    common = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, pad_token_id=3, bos_token_id=1, eos_token_id=2)
    if arch == "gpt2":
        common = dict(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    elif arch in ("gemma", "gemma2", "gemma3_text", "qwen3"):
        common["head_dim"] = 8
    if arch in ("gemma2", "gemma3_text"):
        common["sliding_window"] = 128
    common.update(overrides)
    return AutoConfig.for_model(arch, **common)


def tiny_model(arch: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    """A seeded 2-layer random model of ``arch`` with attention implementation ``attn``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(arch, **overrides)
    if arch == "gemma2" and attn == "sdpa":
        attn = "eager"  # gemma2 refuses sdpa (logit soft-capping)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
    with torch.no_grad():  # random init of some archs leaves norms at exactly 0/1: perturb so layers differ
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def same_weights(model, attn: str):
    """The same model under another attention implementation (a deep copy of the config)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    other = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
    other.load_state_dict(model.state_dict())
    return other.eval()


def sharp_model(arch: str = "llama"):
    """A tiny model with weights x10: attention sharp enough that option order changes
    answers (an order-sensitive variant must show it)."""
    model = tiny_model(arch, max_position_embeddings=1024)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(10)
    return model


def saved(model, path) -> str:
    """``model`` and the tiny tokenizer saved as a model directory (for ``--model DIR``)."""
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def run_cli(capsys, *argv):
    """``setllm ARGV`` in-process: (exit code, stdout, stderr)."""
    from setllm.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
