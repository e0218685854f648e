"""Every declared case (Case, LazyCase, RankedCase) validates its pipeline through one helper, one wording."""

from __future__ import annotations

import pytest

from compile_checks import Case, LazyCase
from compile_checks.ranks.spec import RankedCase, RankedCaseError
from compile_checks.vocab import Pipeline

MAKERS = {
    "Case": (lambda p: Case("a", print, pipeline=p), ValueError),
    "LazyCase": (lambda p: LazyCase("a", lambda: None, pipeline=p), ValueError),
    "RankedCase": (lambda p: RankedCase("a", "cases.py:make", pipeline=p), RankedCaseError),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_an_unknown_pipeline_is_refused_naming_the_case_and_the_choices(kind: str) -> None:
    make, error = MAKERS[kind]
    with pytest.raises(error, match=rf"^{kind} 'a': pipeline 'bad' is not one of the pipelines stock, vllm, "):
        make("bad")
    assert make("vllm").pipeline is Pipeline.VLLM  # negative control: a known name is taken, as the enum
