"""Make a tiny random Llama for real vLLM on CPU, with a locally trained byte-level BPE tokenizer.

Run with the vLLM venv's Python (it needs torch, tokenizers and transformers):
    python make_vllm_model.py DIR [--vocab 8192] [--max-positions 8192] [--head-dim 64]
vLLM's CPU attention supports only some head sizes (32, 64, 80, 96, 112, 128, ... in 0.32.0): any other
head_dim boots and then fails in the attention backend, so the script refuses it up front.
With the defaults a token's KV takes 2 layers x (K + V) x 2 KV heads x 64 x 2 bytes = 1,024 bytes, so a
pool of B bytes holds B / 1024 tokens (1 GiB = 1,048,576 tokens, the figure vLLM logs).
"""

import argparse
import os
import random
import sys

CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256)


def _corpus() -> list[str]:
    """Sentences to train the tokenizer on: real words plus random pseudo-words, seeded."""
    words = (
        "the a of to and in is it that for on with as was at by an be this from or have not are "
        "cache token pool memory server model engine prefill decode request window context length "
        "batch kernel layer head attention rollout check verify measure report size tokens gpu cpu"
    ).split()
    letters = "abcdefghijklmnopqrstuvwxyz"
    pseudo = ["".join(random.choice(letters) for _ in range(random.randint(3, 9))) for _ in range(6000)]
    sentences = [" ".join(random.choice(words) for _ in range(random.randint(5, 20))) + "." for _ in range(600)]
    sentences += [" ".join(random.choice(pseudo) for _ in range(12)) for _ in range(3000)]
    sentences += ["The quick brown fox jumps over the lazy dog.", "Hello world!", "What is the capital of France?"]
    return sentences


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--max-positions", type=int, default=8192)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()
    if args.head_dim not in CPU_HEAD_DIMS:
        sys.exit(f"--head-dim {args.head_dim}: vLLM's CPU attention supports {', '.join(map(str, CPU_HEAD_DIMS))}")

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(args.out, exist_ok=True)
    random.seed(0)
    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=args.max_positions,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(args.out)

    heads = 4
    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=heads * args.head_dim,
        intermediate_size=2 * heads * args.head_dim,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=2,
        head_dim=args.head_dim,
        max_position_embeddings=args.max_positions,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    cfg.torch_dtype = "bfloat16"
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.bos_token_id = fast.bos_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(args.out)
    print(f"tiny vLLM model in {args.out}: vocab {args.vocab}, {args.max_positions} positions, head_dim {args.head_dim}")


if __name__ == "__main__":
    main()
