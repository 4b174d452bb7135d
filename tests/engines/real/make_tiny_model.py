"""Make a tiny random Llama and a locally trained byte-level BPE tokenizer, so no weights are downloaded.

Run with the real-engine venv's Python (it needs torch, tokenizers and transformers):
    python make_tiny_model.py DIR [--vocab 8192] [--max-positions 8192]
Token ids at or above the vocabulary kill SGLang's scheduler (IndexError in the embedding), so the
vocabulary stays above the ids kvcheck's probe sends.
"""

import argparse
import os
import random


def _corpus() -> list[str]:
    """Sentences to train the tokenizer on: real words plus random pseudo-words, seeded."""
    words = (
        "the a of to and in is it that for on with as was at by an be this from or have not are "
        "cache token pool memory server model engine prefill decode request window context length "
        "batch kernel layer head attention rollout check verify measure report size tokens gpu cpu "
        "alpha beta gamma delta red green blue small large fast slow north south east west"
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
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--max-positions", type=int, default=8192)
    args = parser.parse_args()
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
    assert len(fast) >= args.vocab - 64, len(fast)

    # The model has args.vocab rows: ids above the tokenizer's last id decode to nothing.
    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=args.max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    cfg.torch_dtype = "bfloat16"
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(args.out)
    with open(os.path.join(args.out, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    print("saved", args.out, "vocab", args.vocab, "params", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
