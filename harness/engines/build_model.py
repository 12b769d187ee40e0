"""Build a small Llama-architecture model with random weights, and its tokenizer, from a seed.

No model hub: the tokenizer is a byte-level BPE trained here with `tokenizers` on a
generated corpus, the weights are drawn from torch's generator. Runs under the real
engine's virtualenv (torch, transformers, tokenizers), not rollcheck's:

    python build_model.py --size tiny --seed 0 --out DIR
    python build_model.py --adapter-of DIR --seed 1 --out ADAPTER_DIR

An adapter is a LoRA adapter for a model built here (PEFT's layout: adapter_config.json
and adapter_model.safetensors, rank 8 on q_proj and v_proj), its A and B drawn from the
seed; B is not zero (PEFT's initial value), so each adapter changes the answers.

Sizes: `tiny` (hidden 256 x 2 layers, about 1 ms a token on 2 cores: for wire tests)
and `slow` (hidden 1024 x 8 layers, 136 M parameters, about 13 ms a token alone and
60 ms with 4 streams: slow enough that a SIGTERM lands mid-stream).
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

SIZES = {
    "tiny": dict(
        hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4
    ),
    "slow": dict(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16
    ),
}
VOCAB = 1000
WORDS = (
    "the a an of to and in is it that was for on are as with be at by this had not but what "
    "all were when we there can been one do did will each which she how their if up out "
    "many then them these so some her would make like him into time has two more go see "
    "rollout drain pod replica stream token answer engine gateway cluster node scale"
).split()
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 20))) for _ in range(lines)]


def build(size: str, seed: int, out: Path) -> None:
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # BPE merges in a fixed order
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        **SIZES[size],
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "rollcheck-model.json").write_text(json.dumps({"size": size, "seed": seed}) + "\n")


ADAPTER_RANK = 8
ADAPTER_MODULES = ("q_proj", "v_proj")


def build_adapter(base: Path, seed: int, out: Path) -> None:
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    out_features = {"q_proj": hidden, "v_proj": hidden // heads * kv_heads}
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers):
        for module in ADAPTER_MODULES:
            key = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            a = torch.randn(ADAPTER_RANK, hidden, generator=gen) / hidden**0.5
            b = torch.randn(out_features[module], ADAPTER_RANK, generator=gen) * 0.5
            tensors[f"{key}.lora_A.weight"] = a.to(torch.bfloat16).contiguous()
            tensors[f"{key}.lora_B.weight"] = b.to(torch.bfloat16).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base),
        "r": ADAPTER_RANK,
        "lora_alpha": 2 * ADAPTER_RANK,
        "lora_dropout": 0.0,
        "target_modules": list(ADAPTER_MODULES),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=1) + "\n")
    (out / "rollcheck-adapter.json").write_text(json.dumps({"seed": seed}) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--adapter-of", type=Path, default=None, help="a LoRA adapter for this model")
    ns = p.parse_args()
    if ns.adapter_of is not None:
        build_adapter(ns.adapter_of, ns.seed, ns.out)
    else:
        build(ns.size, ns.seed, ns.out)


if __name__ == "__main__":
    main()
