"""Argument types the ``tether`` parsers share (cli.py and the commands that add their own
arguments): each turns a command-line word into a value or raises argparse's error."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number of 1 or more (counts, attempts, seconds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return value


def label(text: str) -> tuple[str, str]:
    """A device label to match, ``K=V``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    return key, value
