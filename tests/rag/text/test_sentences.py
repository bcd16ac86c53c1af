"""A full stop after an abbreviation or an initial does not end a sentence, in the chunker's splitter and in the
answer's; a decimal point never did."""

from __future__ import annotations

import pytest

from rag.retrieval import chunking
from rag.rules import terms
from rag.rules.answers import cite

TEXT = (
    "For help, phone the service desk at 02-2345-6789 ext. 88100. Dr. Lin answers, e.g. on Mondays. Files may be "
    "up to 3.5 GB. The desk opens at 9 a.m. Monday to Friday. J. Smith wrote it. We support Chrome, Edge, etc. "
    "Safari is not supported."
)
SENTENCES = [
    "For help, phone the service desk at 02-2345-6789 ext. 88100.",
    "Dr. Lin answers, e.g. on Mondays.",
    "Files may be up to 3.5 GB.",
    "The desk opens at 9 a.m. Monday to Friday.",
    "J. Smith wrote it.",
    "We support Chrome, Edge, etc.",
    "Safari is not supported.",
]


@pytest.mark.parametrize("split", [terms.split_sentences, chunking.split_sentences], ids=["answer", "chunker"])
def test_abbreviations_numbers_and_initials_stay_inside_their_sentence(split: object) -> None:
    assert split(TEXT) == SENTENCES  # type: ignore[operator]


def test_a_citation_never_splits_an_abbreviation_from_what_follows() -> None:
    assert cite("Phone ext. 88100.", 1, "en") == "Phone ext. 88100 [1]."
    assert cite("We support Chrome, Edge, etc.", 2, "en") == "We support Chrome, Edge, etc. [2]"


def test_a_stop_before_a_capital_still_ends_a_sentence() -> None:
    assert terms.split_sentences("Reset it. Then log in. 3 attempts are allowed.") == [
        "Reset it.",
        "Then log in.",
        "3 attempts are allowed.",
    ]
