"""Every citation of docs/trtllm_reference.md in code and tests names a section that exists."""

import re

from tests.conftest import REPO

DOC = REPO / "docs" / "trtllm_reference.md"
# "docs/trtllm_reference.md, section 3.4", "sections 2.3 and 3.2", "reference 2.4", "ref 2.4"
CITATION = re.compile(
    r"(?:trtllm_reference(?:\.md)?`?,?|reference|\bref)\s+(?:sections?\s+)?"
    r"(\d+(?:\.\d+)?(?:(?:,\s*|\s+and\s+|-)\d+(?:\.\d+)?)*)"
)


def sections() -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC.read_text(), flags=re.MULTILINE))


def citations() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for root in ("pipeline", "tests", "conf"):
        for path in (REPO / root).rglob("*"):
            if path.suffix not in (".py", ".md", ".yaml") or "__pycache__" in path.parts:
                continue
            text = path.read_text()
            if "trtllm_reference" not in text and not path.is_relative_to(REPO / "pipeline/trtllm"):
                continue
            for match in CITATION.finditer(text):
                numbers = re.findall(r"\d+(?:\.\d+)?", match.group(1))
                found.setdefault(str(path.relative_to(REPO)), set()).update(numbers)
    return found


def test_every_cited_section_exists():
    known = sections()
    assert {"1.2", "2.4", "3.4", "5.1", "6.2", "8"} <= known
    cited = citations()
    assert len(cited) >= 12  # the trtllm package, the quant export and their tests
    missing = {path: sorted(n - known) for path, n in cited.items() if n - known}
    assert missing == {}


def test_the_reference_speaks_of_upstream_only():
    text = DOC.read_text()
    assert not re.search(r"\.\./shared|\bissue \d|\blease\b|this machine|\bstop \d", text, re.I)
