"""The page as text (issue 45): long texts reach the model whole while the observation's texts fit a budget; past
it every text is cut at one length (never below TEXT_CHARS), so one long text cannot push the rest out."""
from __future__ import annotations

from envs.web.observe import MAX_ELEMENTS, TEXT_BUDGET, TEXT_CHARS, element_list, text_cap


def _p(ref: int, text: str) -> dict:
    return {"ref": ref, "tag": "p", "text": text}


def test_a_long_text_that_fits_the_budget_is_shown_whole():
    answer = "The code word you must type in the box below is " + "x" * 150 + " PINEAPPLE"
    out = element_list([_p(1, answer), {"ref": 2, "tag": "input", "type": "text", "value": ""}])
    assert "PINEAPPLE" in out and "..." not in out  # cut at 60 characters before


def test_past_the_budget_every_text_is_cut_at_one_length_and_short_ones_stay_whole():
    elements = [_p(i, f"paragraph {i} " + "y" * 800) for i in range(1, 6)] + [_p(9, "Submit")]
    cap = text_cap(elements)
    assert TEXT_CHARS <= cap < 800
    out = element_list(elements)
    assert '"Submit"' in out and out.count("...") == 5
    texts = sum(min(len(e["text"]), cap) for e in elements)
    assert texts <= TEXT_BUDGET


def test_the_observation_stays_bounded_whatever_the_page():
    huge = [_p(i, "z" * 1_000_000) for i in range(1, 200)]
    out = element_list(huge)
    assert len(out) < MAX_ELEMENTS * (TEXT_CHARS + 40) + 100 and f"{199 - MAX_ELEMENTS} more elements" in out
