"""A reference patch as editor calls: the narrowest unique str_replace per hunk."""

from __future__ import annotations

import pytest

from agentgym.envs.swe.edits import patch_edits

BEFORE = "def a():\n    x = 1\n    return x\n\n\ndef b():\n    x = 1\n    return x + 1\n"
PATCH = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -5,4 +5,4 @@ def a():
 
 def b():
     x = 1
-    return x + 1
+    return x + 2
"""
DUPLICATE = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -4,5 +4,5 @@ def a():
 
 
 def b():
-    x = 1
+    x = 2
     return x + 1
"""


def test_a_unique_change_takes_no_context():
    calls = patch_edits(PATCH, {"m.py": BEFORE}.get)
    assert calls == [{"command": "str_replace", "path": "m.py",
                      "old_str": "    return x + 1", "new_str": "    return x + 2"}]


def test_a_repeated_line_takes_context_until_it_is_unique():
    (call,) = patch_edits(DUPLICATE, {"m.py": BEFORE}.get)
    assert BEFORE.count(call["old_str"]) == 1
    assert call["old_str"] == "def b():\n    x = 1" and call["new_str"] == "def b():\n    x = 2"
    assert BEFORE.replace(call["old_str"], call["new_str"]) == BEFORE.replace(
        "def b():\n    x = 1", "def b():\n    x = 2")


def test_without_the_file_each_edit_keeps_the_hunks_context():
    (call,) = patch_edits(PATCH, lambda path: None)
    assert call["old_str"] == "\ndef b():\n    x = 1\n    return x + 1"
    assert call["new_str"] == "\ndef b():\n    x = 1\n    return x + 2"


def test_hunks_in_one_file_see_the_earlier_edits():
    two = PATCH.replace("@@ -5,4 +5,4 @@ def a():", "@@ -1,3 +1,3 @@\n def a():\n-    x = 1\n"
                        "+    x = 3\n     return x\n@@ -5,4 +5,4 @@ def a():")
    calls = patch_edits(two, {"m.py": BEFORE}.get)
    text = BEFORE
    for call in calls:
        assert text.count(call["old_str"]) == 1
        text = text.replace(call["old_str"], call["new_str"])
    assert text == BEFORE.replace("    x = 1\n    return x\n", "    x = 3\n    return x\n", 1
                                  ).replace("return x + 1", "return x + 2")


def test_a_new_file_is_created_and_a_deleted_one_refused():
    new = ("diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n"
           "@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n")
    assert patch_edits(new, lambda p: None) == [
        {"command": "create", "path": "n.py", "file_text": "A = 1\nB = 2\n"}]
    gone = ("diff --git a/n.py b/n.py\ndeleted file mode 100644\n--- a/n.py\n+++ /dev/null\n"
            "@@ -1,2 +0,0 @@\n-A = 1\n-B = 2\n")
    with pytest.raises(ValueError, match="deletes or renames"):
        patch_edits(gone, lambda p: "A = 1\nB = 2\n")


def test_without_unidiff_the_error_says_what_to_install(monkeypatch):
    import sys

    from agentgym.errors import ConfigError

    monkeypatch.setitem(sys.modules, "unidiff", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'agentgym\[swe\]'"):
        patch_edits(PATCH, lambda path: None)
