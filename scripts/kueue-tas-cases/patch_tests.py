"""Add gangscope's dump calls to a copy of one of Kueue's test files: before the first
``for name, tc := range cases {`` of function TEST, ``gangscopeDumpCases("TEST", cases)``, and for
each further name a table-level variable the cases use (``gangscopeDumpCases("TEST.VAR", ...)``).

    python3 patch_tests.py FILE TEST [VAR ...]
"""

from __future__ import annotations

import re
import sys


def main() -> None:
    path, test, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    s = open(path).read()
    m = re.search(rf"^func {test}\(t \*testing.T\) \{{", s, re.M)
    if m is None:
        raise SystemExit(f"{path}: no func {test}")
    k = s.index("\tfor name, tc := range cases {", m.start())
    calls = [f'\tgangscopeDumpCases("{test}", cases)\n']
    calls += [f'\tgangscopeDumpCases("{test}.{v}", map[string]any{{"{v}": {v}}})\n' for v in extra]
    open(path, "w").write(s[:k] + "".join(calls) + s[k:])


if __name__ == "__main__":
    main()
