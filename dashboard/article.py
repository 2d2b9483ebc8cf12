"""The seed article, named and quoted where its lessons are shown.

Scope: a few short quotations (a sentence each) and how the article is named; the article itself
is not part of this project (the project's copy lives outside it, in shared/seed/). Views show
these next to what the tool measured, so a reader can tell the article's words from the tool's.
"""

from __future__ import annotations

# The article has no title line of its own; it is named by what it is.
NAME = ("the seed article, a blog post that extends PyTorch's CUDA Graphs tutorial (the "
        "N=640, 4096 -> 2048 -> 1024 training step) with a static counter")
SHORT_NAME = "the seed article"

# Lesson number -> the article's own sentence (quoted exactly).
LESSONS = {
    1: "Lesson 1: we perform computation during warm up but not graph capture.",
    2: "Lesson 2: only what happens during graph capture matters.",
    3: "Lesson 3: we can explicitly capture a for loop in a graph.",
}
# What it concluded from its counter after lesson 1 (quoted exactly).
COUNTER_FINDING = ("We observe that static counter\u2019s value has increased by +1 during stream "
                   "capture, but not graph capture.")
# How it timed, and what it found (quoted exactly).
TIMING = ("It is worth noting that whenever performance we measure, it is very crucial to "
          "separate the CPU launch time and the GPU computation time.")
SPEED = "In this toy example, CUDA Graph offers a 4% reduction in training time on average."


def quote(*texts: str) -> str:
    """One or more sentences as one Markdown block quote, the article named under them. The
    texts are this module's own constants (never run data), so they are not escaped."""
    body = "\n>\n".join(f"> {text}" for text in texts)
    return f"{body}\n>\n> -- {SHORT_NAME}"
