"""corpus.py - the training corpus and the SentencePiece tokenizer of tiny-moe-4e2r.

Corpus: the King James Bible as Debian's bible-kjv-text ships it (/usr/lib/bible.data, read with
the `bible` program of bible-kjv). The KJV text (1611) is out of copyright; see docs/models.md.
One document per chapter: a heading line "Genesis 1", then the chapter's verses (numbers dropped)
as one paragraph, verses joined by a space, so that every word follows a space and keeps its
"▁word" piece.
Chapters whose index % 50 == 25 (2 %) are held out for validation, the rest is for training.

Tokenizer: SentencePiece BPE trained with Debian's spm_train on the training split only, in the
settings llama.cpp's SPM tokenizer reproduces: identity normalization, no whitespace collapsing,
a dummy-prefix space, byte fallback (the 256 <0xNN> pieces), digits split.
"""
import os
import subprocess

HOLDOUT_EVERY, HOLDOUT_AT = 50, 25


def read_kjv_chapters():
    """[(heading, [verse, ...]), ...] for every chapter, in canonical order."""
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters = []
    for line in out.split("\n"):
        s = line.strip()
        if not s:
            continue
        if not line.startswith(" "):          # "Genesis 1", "Song of Solomon 3"
            chapters.append((s, []))
            continue
        num, _, verse = s.partition(" ")
        if not num.isdigit() or not chapters:
            raise ValueError(f"bible output: unexpected line {line!r}")
        chapters[-1][1].append(verse.strip())
    if len(chapters) != 1189:
        raise ValueError(f"bible output: {len(chapters)} chapters, expected 1189")
    return chapters


def chapter_text(ch):
    heading, verses = ch
    return heading + "\n" + " ".join(verses) + "\n"


def split_chapters(chapters):
    train = [c for i, c in enumerate(chapters) if i % HOLDOUT_EVERY != HOLDOUT_AT]
    valid = [c for i, c in enumerate(chapters) if i % HOLDOUT_EVERY == HOLDOUT_AT]
    return train, valid


def write_corpus(outdir):
    """Writes train.txt / valid.txt (chapters joined) and spm_lines.txt (one verse a line)."""
    os.makedirs(outdir, exist_ok=True)
    train, valid = split_chapters(read_kjv_chapters())
    paths = {}
    for name, chs in (("train", train), ("valid", valid)):
        p = os.path.join(outdir, name + ".txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write("".join(chapter_text(c) for c in chs))
        paths[name] = p
    p = os.path.join(outdir, "spm_lines.txt")
    with open(p, "w", encoding="utf-8") as f:
        for heading, verses in train:
            f.write(heading + "\n")
            f.writelines(v + "\n" for v in verses)
    paths["spm_lines"] = p
    return train, valid, paths


def train_tokenizer(lines_path, prefix, vocab_size):
    """Runs Debian's spm_train; returns the .model path."""
    cmd = ["spm_train", f"--input={lines_path}", f"--model_prefix={prefix}",
           f"--vocab_size={vocab_size}", "--model_type=bpe", "--character_coverage=1.0",
           "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
           "--add_dummy_prefix=true", "--byte_fallback=true", "--split_digits=true",
           "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1",
           "--num_threads=1", "--input_sentence_size=0", "--shuffle_input_sentence=false",
           "--max_sentence_length=16384"]
    subprocess.run(cmd, check=True, capture_output=True)
    return prefix + ".model"


def spm_encode_cli(model_path, lines):
    """ids of each line through the spm_encode command (the reference the engine is tested against)."""
    r = subprocess.run(["spm_encode", f"--model={model_path}", "--output_format=id"],
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True, check=True)
    return [[int(t) for t in row.split()] for row in r.stdout.split("\n")[:len(lines)]]
