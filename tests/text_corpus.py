"""Tiny text corpora written into a test's folder, for the data and text-task tests."""

import csv
import random

WORDS = ("the a one every some king queen fool ghost sword crown night day sea storm rose heart grave "
         "speaks weeps laughs falls sleeps rises sings fights dreams waits slowly softly alone again "
         "here there now never always").split()
POSITIVE = "great wonderful superb moving brilliant delightful".split()
NEGATIVE = "awful boring dreadful clumsy tedious dismal".split()


def sentence(rng: random.Random) -> str:
    """`the king speaks softly .` and the like: a small grammar, so a model has something to learn."""
    return (f"{rng.choice(WORDS[:5])} {rng.choice(WORDS[5:18])} {rng.choice(WORDS[18:27])} "
            f"{rng.choice(WORDS[27:])} .")


def write_text_corpus(folder, documents: int = 12, sentences: int = 30, seed: int = 0):
    """`documents` .txt files of `sentences` lines each, in `folder`; returns the folder."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        (folder / f"doc{i:02d}.txt").write_text("\n".join(sentence(rng) for _ in range(sentences)) + "\n")
    return folder


def write_sentiment_csv(path, rows: int = 300, seed: int = 0):
    """A separable toy review set: every sentence of a positive review holds a positive
    word, of a negative one a negative word (`the ghost was dismal .`); label 1 positive."""
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["text", "label"])
        for i in range(rows):
            label = i % 2
            words = POSITIVE if label else NEGATIVE
            text = " ".join(f"{rng.choice(WORDS[:5])} {rng.choice(WORDS[5:18])} was {rng.choice(words)} ."
                            for _ in range(rng.randint(1, 3)))
            out.writerow([text, label])
    return path
