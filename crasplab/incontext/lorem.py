"""Lorem-ipsum paragraphs to copy, forward or word by word backward (retrieval/copying paper,
section 4.2), and the few-shot prompts that ask for the copy.

A paragraph is a stream of sentences of 4 to 10 words, cut at the first word where it reaches the
requested number of tokens of the model's tokenizer (and closed with a period there). Words come
from a fixed list of 206 Latin words, each used once in a shuffled order (reshuffled when a long
paragraph has used them all), except that with probability `repeat_word` a word slot repeats a
word already used and with probability `repeat_sentence` a whole earlier sentence comes again.
Repeats give some tokens several different successors in the text, which is what the alignment
analysis (incontext.alignment) looks at.

Our own generator rather than the `lorem` or `lorem-text` packages: they draw from Python's global
`random` state, have no repeat structure to set and no token-length cut, and their word lists may
change between versions, which would change a seed's paragraphs. Here a seed fixes the paragraphs
(numpy's generator), per requested length and index; two tokenizers see prefixes of the same word
stream.

Prompt (`direction` forward or backward):

    Repeat the text word by word, in the same order.          (backward: "in reverse order: the last word first.")

    Text: Quo minus. Ab ...
    Answer: Quo minus. Ab ...                                  (backward: "... Ab minus. Quo")

    Text: <paragraph>
    Answer:

The answer is the rest of the line; words keep their punctuation and capitals when reversed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from crasplab.incontext.directions import Direction
from crasplab.records.settings import Settings

LATIN_WORDS = tuple(
    """
lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna
aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute
irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident
sunt culpa qui officia deserunt mollit anim id est laborum perspiciatis unde omnis iste natus error voluptatem
accusantium doloremque laudantium totam rem aperiam eaque ipsa quae ab illo inventore veritatis quasi architecto beatae
vitae dicta explicabo nemo ipsam quia voluptas aspernatur aut odit fugit consequuntur magni dolores eos ratione sequi
nesciunt neque porro quisquam dolorem adipisci numquam eius modi tempora incidunt magnam quaerat etiam minima nostrum
exercitationem ullam corporis suscipit laboriosam aliquid commodi consequatur autem vel eum iure quam nihil molestiae
illum quo at vero accusamus iusto odio dignissimos ducimus blanditiis praesentium deleniti atque corrupti quos quas
molestias excepturi occaecati cupiditate provident similique mollitia animi dolorum fuga harum quidem rerum facilis
expedita distinctio nam libero tempore cum soluta nobis eligendi optio cumque impedit minus maxime placeat facere
possimus assumenda repellendus temporibus quibusdam officiis debitis necessitatibus saepe eveniet voluptates
repudiandae recusandae itaque earum hic tenetur sapiente delectus reiciendis voluptatibus maiores alias perferendis
doloribus asperiores repellat
""".split()
)
SENTENCE_WORDS = (4, 10)  # shortest and longest sentence, in words

INSTRUCTIONS = {
    False: "Repeat the text word by word, in the same order.",
    True: "Repeat the text word by word, in reverse order: the last word first.",
}


def _fresh_words(rng: np.random.Generator) -> Iterator[str]:
    """The word list in shuffled order, reshuffled whenever it runs out."""
    while True:
        yield from (LATIN_WORDS[k] for k in rng.permutation(len(LATIN_WORDS)))


def sentences(rng: np.random.Generator, repeat_word: float, repeat_sentence: float) -> Iterator[list[str]]:
    """An endless stream of sentences, each a list of lowercase words."""
    fresh = _fresh_words(rng)
    said: list[list[str]] = []
    used: list[str] = []  # distinct words so far: a repeat picks any of them alike
    while True:
        if said and rng.random() < repeat_sentence:
            sentence = said[rng.integers(len(said))]
        else:
            sentence = []
            for _ in range(rng.integers(SENTENCE_WORDS[0], SENTENCE_WORDS[1] + 1)):
                if used and rng.random() < repeat_word:
                    sentence.append(used[rng.integers(len(used))])
                else:
                    sentence.append(next(fresh))
                    used.append(sentence[-1])
            said.append(sentence)
        yield sentence


def _words(sentence_stream: Iterator[list[str]]) -> Iterator[str]:
    """The words of the sentences as they are written: capital first, period last (a sentence has
    at least SENTENCE_WORDS[0] >= 2 words)."""
    for sentence in sentence_stream:
        yield from (sentence[0].capitalize(), *sentence[1:-1], sentence[-1] + ".")


def paragraph(
    rng: np.random.Generator,
    length: int,
    count_tokens: Callable[[str], int],
    repeat_word: float,
    repeat_sentence: float,
) -> str:
    """The shortest prefix of a sentence stream, in words and closed with a period, that has at
    least `length` tokens."""
    stream = _words(sentences(rng, repeat_word, repeat_sentence))
    words: list[str] = []
    while True:
        words.append(next(stream))
        text = " ".join(words)
        closed = text if text.endswith(".") else text + "."
        if count_tokens(closed) >= length:
            return closed


def answer(direction: Direction, text: str) -> str:
    return " ".join(direction.arrange(text.split()))


def format_prompt(direction: Direction, demonstrations: list[str], text: str) -> str:
    blocks = [INSTRUCTIONS[direction.reverse]]
    blocks += [f"Text: {demo}\nAnswer: {answer(direction, demo)}" for demo in demonstrations]
    blocks.append(f"Text: {text}\nAnswer:")
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class LoremItem:
    direction: str
    length: int  # requested tokens of the paragraph
    index: int
    prompt: str
    reference: str  # the answer line: the paragraph, or its words reversed


@dataclass(frozen=True)
class LoremSettings(Settings):
    """How the paragraphs are drawn: the part of LoremRunSettings that decides the texts."""

    seed: int
    demonstrations: int
    demo_length: int
    repeat_word: float
    repeat_sentence: float

    def paragraphs(self, length: int, index: int, count_tokens: Callable[[str], int]) -> tuple[str, list[str]]:
        """The test paragraph of item (length, index) and its demonstrations; the same for both
        directions, so forward and backward are compared on the same texts."""

        def draw(stream: int, tokens: int) -> str:
            rng = np.random.default_rng([self.seed, length, index, stream])
            return paragraph(rng, tokens, count_tokens, self.repeat_word, self.repeat_sentence)

        return draw(0, length), [draw(1 + k, self.demo_length) for k in range(self.demonstrations)]

    def items(self, direction: Direction, length: int, n: int, count_tokens: Callable[[str], int]) -> list[LoremItem]:
        items = []
        for index in range(n):
            text, demos = self.paragraphs(length, index, count_tokens)
            items.append(
                LoremItem(direction.name, length, index, format_prompt(direction, demos, text), answer(direction, text))
            )
        return items
