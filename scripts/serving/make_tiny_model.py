"""Make the tiny model ``transformers serve`` serves in the ``serve_tiny`` example: a random GPT-2
(2 layers, 64 wide) and a byte-level BPE tokenizer trained here, offline, on a generated corpus.

Nothing is downloaded and no model file is kept in the repository: the folder is made at run time
(seeded, so every run makes the same model). Usage: ``python3 make_tiny_model.py FOLDER``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

WORDS = ("the model serves tokens quickly while the client measures time to first token and the gap "
         "between tokens under load with many concurrent streams of requests and responses").split()
VOCAB_SIZE = 512
MAX_POSITIONS = 2048


def corpus(lines: int = 2000, seed: int = 0) -> list[str]:
    """Sentences of the words above in random order (the BPE merges come from these)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))) for _ in range(lines)]


def make_tokenizer(folder: Path) -> int:
    """A byte-level BPE tokenizer trained on :func:`corpus`, saved as a GPT-2 fast tokenizer;
    returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                   model_max_length=MAX_POSITIONS)
    # a chat template, so /v1/chat/completions works too: the messages' text, one per line
    fast.chat_template = ("{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}{% endif %}")
    fast.save_pretrained(folder)
    return tokenizer.get_vocab_size()


def make_model(folder: Path, vocab_size: int) -> None:
    """A GPT-2 of random weights (seed 0) of that vocabulary, saved beside the tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab_size, n_positions=MAX_POSITIONS, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_tiny_model.py FOLDER", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    make_model(folder, make_tokenizer(folder))
    print(f"tiny GPT-2 and BPE tokenizer in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
