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


def save_model_dir(path, **overrides) -> str:
    """A tiny llama (``overrides`` of its config) and its tokenizer saved as a model directory at ``path``."""
    tiny_model("llama", **overrides).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


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


def write_gguf(path, model, tokenizer) -> None:
    """``model`` (a tiny llama) and its byte-level BPE tokenizer as a GGUF file, laid out as
    llama.cpp's converter writes one (f32 tensors, q/k rows permuted for its RoPE layout)."""
    import json

    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    state = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    vocab = sorted(state["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + [f"<unused{i}>" for i in range(cfg.vocab_size - len(vocab))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in tokenizer.all_special_tokens else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in state["merges"]])
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_add_bos_token(False)

    def permute(t, heads):
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd.get("lm_head.weight", sd["model.embed_tokens.weight"]))
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_v": "self_attn.v_proj",
                 "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
        for ours, theirs in names.items():
            w.add_tensor(f"blk.{i}.{ours}.weight", sd[p + theirs + ".weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_adapter(model_dir: str, path, seed: int = 0, variant: str = "setmask-setpe", **record) -> str:
    """A seeded random LoRA adapter (rank 4, every linear layer; B not zero, so it changes
    the model) for the model saved in ``model_dir``, with the ``setllm.json`` training writes
    (``record``: more of its fields, e.g. ``template``, ``readout``)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from setllm.loading.adapters import AdapterInfo

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(path)
    AdapterInfo(base_model=model_dir, variant=variant, **record).write(path)
    return str(path)
