"""Compatibility characters folded to the characters they stand for, in text as it is loaded.

PDF text extraction often yields Kangxi radicals (U+2F3C ⼼, U+2F9E ⾞, U+2F1D ⼝) where the page shows the
ideographs 心, 車, 口: they look the same, but search does not match them and answers would quote them. Unicode's
NFKC maps them, and the compatibility ideographs, ligatures (ﬁ), full-width letters and digits and no-break
spaces, to their ordinary forms. Only those are folded: NFKC on the whole text would also turn Chinese
full-width punctuation (，：（）) into ASCII, which answers in Chinese must keep.
"""

from __future__ import annotations

import re
import unicodedata

_COMPAT_RE = re.compile(
    "["
    "\u00a0"  # no-break space
    "\u2f00-\u2fdf"  # Kangxi radicals
    "\u2e9f\u2ef3"  # the two CJK radical supplements with a compatibility mapping
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U0002f800-\U0002fa1f"  # CJK compatibility ideographs supplement
    "\ufb00-\ufb06"  # Latin ligatures
    "\uff10-\uff19\uff21-\uff3a\uff41-\uff5a"  # full-width digits and letters
    "]"
)


def fold_compatibility(text: str) -> str:
    """The text with compatibility characters replaced by their NFKC forms; everything else unchanged."""
    return _COMPAT_RE.sub(lambda match: unicodedata.normalize("NFKC", match.group()), text)
