"""A tiny Llama for the engine tier, written as a user uploads one: random bf16 weights in two safetensors shards,
its config, and a real tokenizer (byte-level BPE trained here on a fixed text, so that vLLM tokenizes prompts and
detokenizes completions the way it does for a published model).

Run with the vLLM environment's interpreter (it has torch, safetensors and tokenizers):
    python tests/engine/tiny_model.py <folder>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,  # the CPU attention kernels take 32, 64, 80, 96, 112, 128, 256
    "vocab_size": 512,
    # The rendered --max-model-len (8192 in the shipped configs) must fit the model.
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SPECIAL = ["<unk>", "<s>", "</s>"]
# Any text will do: the tokenizer only has to cover bytes and give the prompts real tokens.
CORPUS = [
    "warmstart restores the compile cache before the pod starts, so vLLM loads its compiled graphs.",
    "A new node pulls the image, streams the weights from S3 and compiles the model once.",
    "The quick brown fox jumps over the lazy dog. 0123456789 !?,.;:'\"()[]{}",
] * 50


def tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS, trainer=trainer)
    bpe.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": CONFIG["max_position_embeddings"],
            }
        )
    )


def weights(folder: Path, config: dict) -> None:
    """Random bf16 weights under the Hugging Face Llama parameter names, in two safetensors shards."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]

    def weight(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    tensors = {"model.embed_tokens.weight": weight(v, h), "model.norm.weight": ones(h), "lm_head.weight": weight(v, h)}
    kv = config.get("num_key_value_heads", config["num_attention_heads"]) * config.get(
        "head_dim", h // config["num_attention_heads"]
    )
    for layer in range(config["num_hidden_layers"]):
        base = f"model.layers.{layer}"
        for name, rows in (("q_proj", h), ("k_proj", kv), ("v_proj", kv)):
            tensors[f"{base}.self_attn.{name}.weight"] = weight(rows, h)
        tensors[f"{base}.self_attn.o_proj.weight"] = weight(h, h)
        tensors[f"{base}.mlp.gate_proj.weight"] = weight(i, h)
        tensors[f"{base}.mlp.up_proj.weight"] = weight(i, h)
        tensors[f"{base}.mlp.down_proj.weight"] = weight(h, i)
        tensors[f"{base}.input_layernorm.weight"] = ones(h)
        tensors[f"{base}.post_attention_layernorm.weight"] = ones(h)
    names = sorted(tensors)
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(folder / "model-00002-of-00002.safetensors"))


def write(folder: Path, config: dict = CONFIG, *, with_tokenizer: bool = True) -> int:
    """The model in `folder`; its size in bytes. Without the tokenizer (bench/gpu_vllm_cold_start.py's larger
    model, prompted with token ids) it needs no `tokenizers` package."""
    folder.mkdir(parents=True, exist_ok=True)
    weights(folder, config)
    if with_tokenizer:
        tokenizer(folder)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return sum(p.stat().st_size for p in folder.iterdir())


if __name__ == "__main__":
    write(Path(sys.argv[1]))
