"""render_markdown.escape: untrusted text from a pull request stays inert text in a GitHub comment."""

import pytest

from hfmem.render.markdown import escape

HOSTILE = "x](http://evil)<img src=x onerror=alert(1)> @everyone.json"


def test_hostile_path_is_inert():
    out = escape(HOSTILE)
    assert "<" not in out and ">" not in out and "](" not in out
    assert "@everyone" not in out and "@&#8203;everyone" in out
    assert out == r"x\]\(http\://evil\)&lt;img src=x onerror=alert\(1\)&gt; @&#8203;everyone.json"


@pytest.mark.parametrize("text, expected", [
    ("a|b", r"a\|b"),
    ("line\nbreak\r\n| x", r"line break \| x"),
    ("fix #12 for @org/team", "fix #&#8203;12 for @&#8203;org/team"),
    ("&lt;b&gt;", "&amp;lt;b&amp;gt;"),
    ("`code` *b* _i_ ~s~ [l]", r"\`code\` \*b\* \_i\_ \~s\~ \[l\]"),
    ("\u202eevil\u200b\x00x", "evil x"),
    (42, "42"),
])
def test_escapes(text, expected):
    assert escape(text) == expected
