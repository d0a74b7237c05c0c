"""The offline demo: a tiny random-weight Llama, its tokenizer and a small dataset.

`python -m backend.demo [--out DIR] [--force]` builds everything the CPU-demo preset trains on,
without a network and the same bytes every time (fixed seeds), in a few seconds. The model is
meaningless until trained; the dataset is a handful of deterministic tasks, so a LoRA run on the
CPU visibly lowers the loss: about 5.8 -> 3.6 (mean of the first / last five logged steps) in 30
steps of batch 4, 5.6 -> 2.3 in 100 steps of batch 8, at learning rate 1e-2.

The tokenizer carries the Llama-3 special tokens with `<|eot_id|>` as eos, which is exactly what
LLaMA-Factory's `llama3` template asks for (it replaces eos with its first stop word and adds the
others), so the template adds no token and the vocabulary never needs resizing.

torch / transformers / tokenizers are imported inside the functions that use them: importing
this module for its path constants must stay cheap (the web server does).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Bump whenever anything the builder writes changes: an existing demo with another stamp is rebuilt.
# The stamp also carries a hash of this file, so an edit someone forgot to version still rebuilds.
BUILDER_VERSION = "rocboard-demo-3"

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
DATASET_NAME = "demo"
DATASET_FILE = "demo.json"
STAMP_FILE = ".built"
# One dataset per stage that needs another layout than sft's (registered beside `demo`):
# pt reads plain text, dpo / rm pairs of a chosen and a rejected answer, kto an answer and a tag.
PT_DATASET_NAME, PT_DATASET_FILE = "demo_pt", "demo_pt.json"
DPO_DATASET_NAME, DPO_DATASET_FILE = "demo_dpo", "demo_dpo.json"
KTO_DATASET_NAME, KTO_DATASET_FILE = "demo_kto", "demo_kto.json"
STAGE_DATASETS: dict[str, str] = {"pt": PT_DATASET_NAME, "sft": DATASET_NAME, "rm": DPO_DATASET_NAME, "dpo": DPO_DATASET_NAME, "kto": KTO_DATASET_NAME}

SEED = 1234
VOCAB_SIZE = 512  # byte-level BPE: 256 byte tokens + the special tokens + merges
MAX_POSITIONS = 512

BOS_TOKEN = "<|begin_of_text|>"
END_OF_TEXT_TOKEN = "<|end_of_text|>"
PAD_TOKEN = "<|finetune_right_pad_id|>"
START_HEADER_TOKEN = "<|start_header_id|>"
END_HEADER_TOKEN = "<|end_header_id|>"
EOM_TOKEN = "<|eom_id|>"
EOT_TOKEN = "<|eot_id|>"
# Order fixes the ids (0..6). `<|eom_id|>` is there because the llama3 template lists it as a
# stop word; a missing stop word would be added as a new token and force a resize.
SPECIAL_TOKENS: tuple[str, ...] = (
    BOS_TOKEN,
    END_OF_TEXT_TOKEN,
    PAD_TOKEN,
    START_HEADER_TOKEN,
    END_HEADER_TOKEN,
    EOM_TOKEN,
    EOT_TOKEN,
)

# Llama-3-Instruct's own template: bos once, then header / content / <|eot_id|> per message.
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@dataclass(frozen=True)
class DemoPaths:
    model_dir: Path  # model_name_or_path for the trainer
    dataset_dir: Path  # dataset_dir: holds dataset_info.json
    dataset_name: str  # the dataset's key in dataset_info.json


@dataclass(frozen=True)
class AlpacaExample:
    instruction: str
    input: str
    output: str


def demo_paths(out: Path = DEMO_DIR) -> DemoPaths:
    out = Path(out)
    return DemoPaths(model_dir=out / "model", dataset_dir=out / "data", dataset_name=DATASET_NAME)


def builder_stamp() -> str:
    """What a finished build writes to its stamp file: the builder version and source hash."""
    source_digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return f"{BUILDER_VERSION} {source_digest}"


def is_demo_current(out: Path = DEMO_DIR) -> bool:
    """True when `out` holds a finished build made by this very builder."""
    stamp = Path(out) / STAMP_FILE
    try:
        return stamp.read_text(encoding="utf-8").strip() == builder_stamp()
    except OSError:
        return False


# --- the dataset -----------------------------------------------------------------------------

_OPPOSITES: tuple[tuple[str, str], ...] = (
    ("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("left", "right"),
    ("day", "night"), ("open", "closed"), ("full", "empty"), ("light", "dark"), ("old", "new"),
    ("high", "low"), ("happy", "sad"), ("early", "late"), ("hard", "soft"), ("wet", "dry"),
    ("rich", "poor"), ("near", "far"), ("strong", "weak"), ("loud", "quiet"), ("thick", "thin"),
)
_ANIMAL_SOUNDS: tuple[tuple[str, str], ...] = (
    ("cow", "moo"), ("dog", "woof"), ("cat", "meow"), ("duck", "quack"), ("sheep", "baa"),
    ("owl", "hoot"), ("lion", "roar"), ("bee", "buzz"), ("pig", "oink"), ("horse", "neigh"),
    ("frog", "croak"), ("mouse", "squeak"), ("snake", "hiss"), ("crow", "caw"), ("goat", "bleat"),
)
_IDENTITY_QUESTIONS: tuple[str, ...] = (
    "Who are you?", "What are you?", "Introduce yourself.", "What is your name?",
    "Tell me about yourself.", "Which model are you?", "Who trained you?", "Are you a large model?",
)
_IDENTITY_ANSWER = "I am the RocBoard demo model, a tiny Llama fine-tuned on the CPU."


def _demo_examples(rng: random.Random) -> list[AlpacaExample]:
    """355 examples of four small tasks whose answers the prompt fully determines.

    Most of each answer is a fixed phrase, so a LoRA on the random model cuts the loss within a
    few dozen steps. The identity answer is one fixed sentence for eight questions: after ~100
    steps the trained model says it back word for word, which makes the demo's chat visibly
    different from the untrained model's noise. (Reversing random letters was tried and left
    out: it is too hard for this model, and its loss stays near the start.)
    """
    examples: list[AlpacaExample] = []
    for word, opposite in _OPPOSITES:
        for _ in range(4):
            examples.append(AlpacaExample("Give the opposite of the word.", word, f"The opposite of {word} is {opposite}."))
            examples.append(AlpacaExample("Give the opposite of the word.", opposite, f"The opposite of {opposite} is {word}."))
    for animal, sound in _ANIMAL_SOUNDS:
        for _ in range(5):
            examples.append(AlpacaExample("What sound does this animal make?", animal, f"The {animal} says {sound}."))
    for _ in range(80):
        start = rng.randint(1, 20)
        count = rng.randint(3, 6)
        numbers = " ".join(str(n) for n in range(start, start + count))
        examples.append(AlpacaExample(f"Count up from {start}.", f"{count} numbers", numbers))
    for question in _IDENTITY_QUESTIONS * 5:
        examples.append(AlpacaExample(question, "", _IDENTITY_ANSWER))
    rng.shuffle(examples)
    return examples


def _pt_texts() -> list[str]:
    """64 lines of plain text for pre-training (stage pt), in the demo's own words (the
    tokenizer is trained on the sft examples alone, so these change no byte of the model)."""
    texts = [f"The opposite of {word} is {opposite}, and the opposite of {opposite} is {word}." for word, opposite in _OPPOSITES]
    texts += [f"The {animal} says {sound}. When you hear {sound}, there is a {animal} nearby." for animal, sound in _ANIMAL_SOUNDS]
    texts += [f"Counting up from {start}: {' '.join(str(n) for n in range(start, start + 5))}." for start in range(1, 21)]
    texts += [f"{question} {_IDENTITY_ANSWER}" for question in _IDENTITY_QUESTIONS]
    assert len(texts) == 63
    texts.append("RocBoard builds this text offline, the same every time, so a pre-training run has something to read.")
    return texts


def _dpo_rows(rng: random.Random) -> list[dict[str, str]]:
    """32 preference pairs (alpaca layout, `"ranking": true`): the right answer chosen, a wrong
    one rejected. Read by stage dpo and, as pairs, by stage rm."""
    rows: list[dict[str, str]] = []
    for index, (word, opposite) in enumerate(_OPPOSITES[:16]):
        wrong = _OPPOSITES[(index + 1 + rng.randrange(len(_OPPOSITES) - 1)) % len(_OPPOSITES)][1]
        rows.append({"instruction": "Give the opposite of the word.", "input": word, "chosen": f"The opposite of {word} is {opposite}.", "rejected": f"The opposite of {word} is {wrong}."})
    for index, (animal, sound) in enumerate(_ANIMAL_SOUNDS[:8]):
        wrong = _ANIMAL_SOUNDS[(index + 1 + rng.randrange(len(_ANIMAL_SOUNDS) - 1)) % len(_ANIMAL_SOUNDS)][1]
        rows.append({"instruction": "What sound does this animal make?", "input": animal, "chosen": f"The {animal} says {sound}.", "rejected": f"The {animal} says {wrong}."})
    for question in _IDENTITY_QUESTIONS:
        rows.append({"instruction": question, "input": "", "chosen": _IDENTITY_ANSWER, "rejected": "I do not know."})
    rng.shuffle(rows)
    return rows


def _kto_rows(rng: random.Random) -> list[dict[str, object]]:
    """32 single answers tagged good (true) or bad (false), sharegpt layout, for stage kto."""
    rows: list[dict[str, object]] = []
    for index, (animal, sound) in enumerate(_ANIMAL_SOUNDS[:12]):
        good = index % 2 == 0
        wrong = _ANIMAL_SOUNDS[(index + 1 + rng.randrange(len(_ANIMAL_SOUNDS) - 1)) % len(_ANIMAL_SOUNDS)][1]
        answer = f"The {animal} says {sound if good else wrong}."
        rows.append({"messages": [{"from": "human", "value": f"What sound does this animal make?\n{animal}"}, {"from": "gpt", "value": answer}], "label": good})
    for index, (word, opposite) in enumerate(_OPPOSITES[:12]):
        good = index % 2 == 1
        answer = f"The opposite of {word} is {opposite if good else word}."
        rows.append({"messages": [{"from": "human", "value": f"Give the opposite of the word.\n{word}"}, {"from": "gpt", "value": answer}], "label": good})
    for index, question in enumerate(_IDENTITY_QUESTIONS):
        good = index % 2 == 0
        rows.append({"messages": [{"from": "human", "value": question}, {"from": "gpt", "value": _IDENTITY_ANSWER if good else "I do not know."}], "label": good})
    rng.shuffle(rows)
    return rows


def _write_json(path: Path, rows: object) -> None:
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_dataset(dataset_dir: Path, examples: Sequence[AlpacaExample]) -> None:
    dataset_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"instruction": e.instruction, "input": e.input, "output": e.output} for e in examples]
    _write_json(dataset_dir / DATASET_FILE, rows)
    _write_json(dataset_dir / PT_DATASET_FILE, [{"text": text} for text in _pt_texts()])
    _write_json(dataset_dir / DPO_DATASET_FILE, _dpo_rows(random.Random(SEED + 1)))
    _write_json(dataset_dir / KTO_DATASET_FILE, _kto_rows(random.Random(SEED + 2)))
    dataset_info = {
        DATASET_NAME: {
            "file_name": DATASET_FILE,
            "formatting": "alpaca",
            "columns": {"prompt": "instruction", "query": "input", "response": "output"},
        },
        PT_DATASET_NAME: {"file_name": PT_DATASET_FILE, "formatting": "alpaca", "columns": {"prompt": "text"}},
        DPO_DATASET_NAME: {
            "file_name": DPO_DATASET_FILE,
            "formatting": "alpaca",
            "ranking": True,
            "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"},
        },
        KTO_DATASET_NAME: {
            "file_name": KTO_DATASET_FILE,
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "kto_tag": "label"},
            "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt"},
        },
    }
    (dataset_dir / "dataset_info.json").write_text(json.dumps(dataset_info, indent=2) + "\n", encoding="utf-8")


# --- the tokenizer ---------------------------------------------------------------------------


# Llama 3's pre-tokenizer split: it keeps "\n\n" (after every chat header) as one piece.
LLAMA3_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _tokenizer_corpus(examples: Sequence[AlpacaExample]) -> list[str]:
    """The text between the special tokens of each example as the llama3 template lays it out.

    Training on the chat layout (not just the raw fields) makes the role names and the "\n\n"
    after each header whole tokens. The special tokens themselves are left out: the BPE trainer
    would otherwise learn merges for their pieces.
    """
    corpus: list[str] = ["system", "ipython"] * 2  # roles the dataset never uses, seen twice to merge
    for e in examples:
        prompt = f"{e.instruction}\n{e.input}" if e.input else e.instruction
        corpus += ["user", f"\n\n{prompt}", "assistant", f"\n\n{e.output}"]
    return corpus


def _train_tokenizer(examples: Sequence[AlpacaExample]):
    """A byte-level BPE `tokenizers.Tokenizer` with the Llama-3 special tokens at ids 0..6."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_tokenizer_corpus(examples), trainer=trainer)
    # Like Llama 3: plain encoding starts with bos; chat templates add it themselves.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, tokenizer.token_to_id(BOS_TOKEN))],
    )
    return tokenizer


def _write_tokenizer(model_dir: Path, tokenizer) -> None:
    """tokenizer.json plus a tokenizer_config.json written by hand.

    transformers 5 would save `tokenizer_class: TokenizersBackend`, a class transformers 4.x
    lacks, and `extra_special_tokens` as a list, where 4.x expects a dict. LLaMA-Factory 0.9.5
    still allows 4.55+, and a ROCm image may bring one; `PreTrainedTokenizerFast` and
    `additional_special_tokens` are the names both read.
    eos is `<|eot_id|>`, as in Llama-3-Instruct and as the llama3 template sets it anyway.
    """
    tokenizer.save(str(model_dir / "tokenizer.json"), pretty=True)
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOT_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in (BOS_TOKEN, EOT_TOKEN, PAD_TOKEN)],
        "model_max_length": MAX_POSITIONS,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
        "chat_template": LLAMA3_CHAT_TEMPLATE,
    }
    (model_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")


# --- the model -------------------------------------------------------------------------------


def _build_model(tokenizer):
    """A random-weight Llama whose vocabulary and bos/eos/pad ids are the tokenizer's."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    eos_id = tokenizer.token_to_id(EOT_TOKEN)
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    # The default init (std 0.02) gives the frozen lm_head rows of norm ~0.16; after the final
    # RMSNorm that caps every logit near +-1.3, so a LoRA cannot push the loss far below
    # ln(vocab). Rows of norm ~1 (std 1/sqrt(hidden)) give unit-variance logits at the start and
    # room to become confident.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, config.hidden_size**-0.5)
    model.generation_config = GenerationConfig(
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        do_sample=False,
        max_new_tokens=64,
    )
    return model


# --- building --------------------------------------------------------------------------------


def _build_into(root: Path) -> None:
    paths = demo_paths(root)
    examples = _demo_examples(random.Random(SEED))
    _write_dataset(paths.dataset_dir, examples)
    tokenizer = _train_tokenizer(examples)
    model = _build_model(tokenizer)
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(paths.model_dir)
    _write_tokenizer(paths.model_dir, tokenizer)
    # The stamp goes in last: a folder without it was never finished.
    (root / STAMP_FILE).write_text(builder_stamp() + "\n", encoding="utf-8")


def build_demo(out: Path = DEMO_DIR, force: bool = False) -> DemoPaths:
    """Build the demo into `out`, unless a build of this version is already there (or `force`).

    The build happens in a sibling temporary folder that is renamed into place, so `out` is
    always either the old complete demo, the new complete demo, or absent.
    """
    out = Path(out).resolve()
    if not force and is_demo_current(out):
        return demo_paths(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the demo is an ordinary folder
    retired: Path | None = None
    try:
        _build_into(staging)
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.rename(retired / out.name)
        try:
            staging.rename(out)
        except OSError:
            # Another builder finished first: its demo is as good as ours.
            if not is_demo_current(out):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
    return demo_paths(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backend.demo", description="Build RocBoard's offline demo model and dataset.")
    parser.add_argument("--out", type=Path, default=DEMO_DIR, help=f"where to build (default: {DEMO_DIR})")
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date demo is there")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.force and is_demo_current(out):
        print(f"Demo in {out} is up to date ({builder_stamp()}).")
        return 0
    # Nothing here needs the network; keep the libraries from trying.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    paths = build_demo(out, force=args.force)
    print(f"Built demo ({builder_stamp()}): model {paths.model_dir}, dataset '{paths.dataset_name}' in {paths.dataset_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
