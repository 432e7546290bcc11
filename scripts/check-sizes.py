#!/usr/bin/env python3
"""The size limits of the tree: no C++/CUDA file over --max-file-lines
(900) lines and no function over --max-function-lines (150) lines in lib/,
passes/, runtime/, tools/ and artifact/.

  check-sizes.py [--root DIR] [--allowlist FILE] [--top N] [DIR...]
  check-sizes.py --functions FILE...       (what the scanner sees, for tests)

An offender fails the check unless the allow-list names it: a line
`PATH LINES` (a file) or `PATH:FUNCTION LINES` (a function), LINES its size
when it was listed. A listed offender passes while it is no larger than
that (and is printed); one that grew fails, and so does an entry that is no
longer over its limit, so the list only shrinks. Prints the offenders and
the N largest files and functions; exits 1 on a failure.

A function is a `{...}` body at namespace or class scope whose header ends
with its parameter list `)`, possibly followed by qualifiers (const,
noexcept, override, `-> T`, ...) or a constructor's initializer list; its
size runs from the header's first line to the closing brace. Lambdas and
local classes count inside their enclosing function; a lambda at namespace
scope (`auto f = [](...) {...};`) is a function named after its variable.
Comments, string and character literals (raw strings included) and
preprocessor lines are skipped. Standard library only.
"""
import argparse
import os
import re
import sys

DEFAULT_DIRS = ["lib", "passes", "runtime", "tools", "artifact"]
SUFFIXES = (".cpp", ".cu", ".h", ".cuh")

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
NUMBER = re.compile(r"\.?[0-9]([0-9A-Za-z_.]|'[0-9A-Za-z]|[eEpP][+-])*")
PUNCT3 = ("->*", "<=>", "<<=", ">>=", "...")
PUNCT2 = ("::", "->", "++", "--", "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=", "/=",
          "%=", "&=", "|=", "^=", ".*")
# A string or character literal's encoding prefix.
LITERAL_PREFIX = re.compile(r"(u8|u|U|L)?(R)?$")


class Token:
    __slots__ = ("text", "line")

    def __init__(self, text, line):
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.text}@{self.line}"


DIRECTIVE = re.compile(r"\s*#\s*(\w+)\s*(.*)")


def first_branches_only(src):
    """src with the lines of `#if 0` blocks and of every `#else`/`#elif`
    branch blanked (newlines kept): the scanner reads one branch of each
    conditional, as a compiler would, so that each branch's braces balance."""
    out = []
    # Per open conditional: "taken" (reading its first branch), "if0"
    # (skipping `#if 0` up to its #else), "done" (skipping later branches).
    stack = []
    for line in src.split("\n"):
        m = DIRECTIVE.match(line)
        word = m.group(1) if m else ""
        if word in ("if", "ifdef", "ifndef"):
            stack.append("if0" if word == "if" and m.group(2).strip() in ("0", "(0)") else "taken")
        elif word in ("else", "elif") and stack:
            stack[-1] = "taken" if stack[-1] == "if0" else "done"
        elif word == "endif" and stack:
            stack.pop()
        skipping = "if0" in stack or "done" in stack
        out.append("" if skipping and not word else line)
    return "\n".join(out)


def tokenize(src):
    """Tokens of C++ source with their 1-based lines; comments, preprocessor
    lines and the contents of literals dropped (a literal is one token, "" or
    '')."""
    src = first_branches_only(src)
    tokens = []
    i, n, line = 0, len(src), 1
    at_line_start = True
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if at_line_start and c == "#":
            # A preprocessor directive, with its continuation lines and any
            # comment inside it.
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    i += 2
                    line += 1
                elif src.startswith("/*", i):
                    end = src.find("*/", i + 2)
                    end = n if end < 0 else end + 2
                    line += src.count("\n", i, end)
                    i = end
                elif src.startswith("//", i):
                    while i < n and src[i] != "\n":
                        i += 1
                else:
                    i += 1
            continue
        at_line_start = False
        if src.startswith("//", i):
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    line += 1
                    i += 1
                i += 1
            continue
        if src.startswith("/*", i):
            end = src.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += src.count("\n", i, end)
            i = end
            continue
        if c == '"' or c == "'":
            i, line = skip_literal(src, i, line, raw=False)
            tokens.append(Token('""' if c == '"' else "''", line))
            continue
        m = IDENT.match(src, i)
        if m:
            word = m.group()
            j = m.end()
            if j < n and src[j] in "\"'" and LITERAL_PREFIX.match(word):
                # u8"..", L'x', R"d(..)d", u8R"(..)": a literal with a prefix.
                start_line = line
                i, line = skip_literal(src, j, line, raw=word.endswith("R") and src[j] == '"')
                tokens.append(Token('""' if src[j] == '"' else "''", start_line))
                continue
            tokens.append(Token(word, line))
            i = j
            continue
        m = NUMBER.match(src, i)
        if m:
            # Digit separators (1'000'000) belong to the number.
            tokens.append(Token("0", line))
            i = m.end()
            continue
        for p in PUNCT3 + PUNCT2:
            if src.startswith(p, i):
                tokens.append(Token(p, line))
                i += len(p)
                break
        else:
            tokens.append(Token(c, line))
            i += 1
    return tokens


def skip_literal(src, i, line, raw):
    """Index and line just past the literal starting with the quote at i."""
    n = len(src)
    quote = src[i]
    if raw:
        open_paren = src.find("(", i + 1)
        delimiter = src[i + 1:open_paren]
        close = src.find(")" + delimiter + '"', open_paren + 1)
        end = n if close < 0 or open_paren < 0 else close + len(delimiter) + 2
        return end, line + src.count("\n", i, end)
    j = i + 1
    while j < n and src[j] != quote:
        if src[j] == "\\":
            if j + 1 < n and src[j + 1] == "\n":
                line += 1
            j += 2
            continue
        if src[j] == "\n":
            # An unterminated literal ends at the line's end.
            break
        j += 1
    return j + 1, line


QUALIFIERS = {"const", "volatile", "noexcept", "override", "final", "mutable", "&", "&&", "try"}
CALL_QUALIFIERS = {"noexcept", "throw", "__attribute__", "alignas", "__declspec"}
CLASS_KEYS = {"class", "struct", "union", "enum"}


def matching_open(header, close):
    """Index of the '(' or '[' that the ')' or ']' at `close` closes."""
    closer = header[close].text
    opener = "(" if closer == ")" else "["
    depth = 0
    for k in range(close, -1, -1):
        t = header[k].text
        if t == closer:
            depth += 1
        elif t == opener:
            depth -= 1
            if depth == 0:
                return k
    return -1


def depth0(header):
    """(index, token) of the header outside parentheses and brackets."""
    depth = 0
    for k, tok in enumerate(header):
        if tok.text in ("(", "["):
            depth += 1
        elif tok.text in (")", "]"):
            depth -= 1
        elif depth == 0:
            yield k, tok


def parameter_list_end(header):
    """Index of the ')' that closes a function's parameter list when the
    header is a function's (it ends with that ')' up to qualifiers, a
    trailing return type or a constructor's initializer list), else -1."""
    if not header:
        return -1
    # A constructor's initializer list or a trailing return type: cut at the
    # first depth-0 ':' or '->' that follows a ')'.
    end = len(header)
    seen_paren = False
    depth = 0
    for k, tok in enumerate(header):
        t = tok.text
        if t in ("(", "["):
            depth += 1
        elif t in (")", "]"):
            depth -= 1
            if depth == 0 and t == ")":
                seen_paren = True
        elif depth == 0 and seen_paren and t in (":", "->"):
            end = k
            break
    k = end - 1
    while k >= 0:
        t = header[k].text
        if t in QUALIFIERS:
            k -= 1
        elif t == "]" and k > 0 and header[k - 1].text == "]":
            # [[attribute]]
            k = matching_open(header, k) - 1
        elif t == ")":
            open_at = matching_open(header, k)
            if open_at > 0 and header[open_at - 1].text in CALL_QUALIFIERS:
                k = open_at - 2
            else:
                return k if open_at >= 0 else -1
        else:
            return -1
    return -1


def skip_template_arguments(header, k):
    """Index before the '<' that opens the template arguments ending at k."""
    depth = 0
    while k >= 0:
        t = header[k].text
        if t == ">":
            depth += 1
        elif t == ">>":
            depth += 2
        elif t == "<":
            depth -= 1
        elif t == "<<":
            depth -= 2
        k -= 1
        if depth <= 0:
            break
    return k


def name_segment(header, k):
    """(text, index before it) of one segment of a qualified name ending at
    k: an identifier (with its template arguments), ~X, or operatorX."""
    if k >= 2 and header[k].text in (")", "]") and header[k - 2].text == "operator":
        return "operator" + header[k - 1].text + header[k].text, k - 3
    if k >= 1 and header[k - 1].text == "operator":
        return "operator" + (" " if IDENT.fullmatch(header[k].text) else "") + header[k].text, k - 2
    if header[k].text in (">", ">>"):
        k = skip_template_arguments(header, k)
    if k >= 0 and IDENT.fullmatch(header[k].text):
        if k >= 1 and header[k - 1].text == "~":
            return "~" + header[k].text, k - 2
        return header[k].text, k - 1
    return "", k


def function_name(header, close):
    """The qualified name before the parameter list that `close` ends."""
    open_at = matching_open(header, close)
    k = open_at - 1
    if k >= 0 and header[k].text == "]" and (k < 2 or header[k - 2].text != "operator"):
        # A lambda: named after the variable it initializes, if any.
        intro = matching_open(header, k)
        eq = [i for i, t in depth0(header[:intro]) if t.text == "="]
        if eq and eq[-1] > 0 and IDENT.fullmatch(header[eq[-1] - 1].text):
            return header[eq[-1] - 1].text
        return "<lambda>"
    segment, k = name_segment(header, k)
    parts = [segment] if segment else []
    while segment and k >= 1 and header[k].text == "::":
        segment, k = name_segment(header, k - 1)
        parts.insert(0, segment)
    return "::".join(parts) or "<anonymous>"


def classify(header):
    """What a '{' after `header` opens at namespace or class scope:
    'namespace', 'class', 'linkage', 'function' or 'initializer'."""
    texts = [t.text for t in header]
    if "namespace" in texts:
        return "namespace"
    if texts == ["extern", '""']:
        return "linkage"
    rest = header[template_prefix_end(texts):]
    close = parameter_list_end(rest)
    if close >= 0:
        return "function"
    # A class key outside parentheses (a macro invocation without a
    # semicolon may precede it), and no '=' (`struct X x = {...}`).
    outside = [t.text for _, t in depth0(rest)]
    if any(t in CLASS_KEYS for t in outside) and "=" not in outside:
        return "class"
    return "initializer"


def template_prefix_end(texts):
    """Index just past the `template <...>` prefixes of a header."""
    k = 0
    while k < len(texts) and texts[k] == "template":
        k += 1
        depth = 0
        while k < len(texts):
            if texts[k] == "<":
                depth += 1
            elif texts[k] == ">":
                depth -= 1
            elif texts[k] == ">>":
                depth -= 2
            k += 1
            if depth <= 0:
                break
    return k


def class_name(header):
    """The name a class, struct, union or enum header declares ('' when
    anonymous)."""
    texts = [t.text for t in header]
    k = template_prefix_end(texts)
    while k < len(texts) and texts[k] not in CLASS_KEYS:
        k += 1
    name = ""
    for t in texts[k + 1:]:
        if t in (":", "<"):
            break
        if IDENT.fullmatch(t) and t not in ("final", "class", "struct", "alignas"):
            name = t
    return name


def functions(src):
    """[(name, first line, last line)] of every function body in src."""
    toks = tokenize(src)
    found = []
    i = 0
    n = len(toks)
    # (kind, class name) of each open namespace, class or linkage block.
    scopes = [("namespace", "")]
    header = []

    def skip_braces(start):
        depth = 0
        for k in range(start, n):
            if toks[k].text == "{":
                depth += 1
            elif toks[k].text == "}":
                depth -= 1
                if depth == 0:
                    return k
        return n - 1

    while i < n:
        tok = toks[i]
        t = tok.text
        if t == ";":
            header = []
        elif t == "}":
            if len(scopes) > 1:
                scopes.pop()
            header = []
        elif t == ":" and scopes[-1][0] == "class" and len(header) == 1 and header[0].text in (
                "public", "private", "protected"):
            header = []
        elif t == "{":
            kind = classify(header)
            body_end = None
            if kind in ("namespace", "linkage", "class"):
                scopes.append((kind, class_name(header) if kind == "class" else ""))
                header = []
            elif kind == "function" and in_initializer_list(header):
                # A brace-initialized member of a constructor's initializer
                # list: part of the header.
                body_end = skip_braces(i)
                header.append(Token("{}", tok.line))
                i = body_end + 1
                continue
            elif kind == "function":
                body_end = skip_braces(i)
                # A function-try-block's handlers belong to the function.
                while body_end + 1 < n and toks[body_end + 1].text == "catch":
                    k = body_end + 2
                    while k < n and toks[k].text != "{":
                        k += 1
                    body_end = skip_braces(k)
                close = parameter_list_end(header)
                name = function_name(header, close)
                # Members defined in their class are named as outside it.
                classes = [c for kind, c in scopes if kind == "class"]
                if classes and not name.startswith("<"):
                    name = "::".join(classes + [name])
                found.append((name, header[0].line, toks[body_end].line))
                header = []
                i = body_end + 1
                continue
            else:
                # A brace initializer or an enum's body: skipped, the
                # statement goes on to its ';'.
                body_end = skip_braces(i)
                header.append(Token("{}", tok.line))
                i = body_end + 1
                continue
        else:
            header.append(tok)
        i += 1
    return found


def in_initializer_list(header):
    """True when the header is a constructor's up to an initializer list's
    member name (`X::X(int a) : m`), so the '{' that follows initializes m."""
    close = -1
    depth = 0
    colon = -1
    for k, tok in enumerate(header):
        t = tok.text
        if t in ("(", "["):
            depth += 1
        elif t in (")", "]"):
            depth -= 1
            if depth == 0 and t == ")" and colon < 0:
                close = k
        elif depth == 0 and t == ":" and close >= 0 and colon < 0:
            colon = k
    if colon < 0:
        return False
    last = header[-1].text
    return bool(IDENT.fullmatch(last)) or last == ">"


def line_count(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def sources(root, dirs):
    for d in dirs:
        top = os.path.join(root, d)
        if os.path.isfile(top):
            yield d
            continue
        for base, subdirs, files in os.walk(top):
            subdirs.sort()
            for f in sorted(files):
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(base, f), root)


def read_allowlist(path):
    entries = {}
    if not path:
        return entries
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            text = raw.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.rsplit(None, 1)
            if len(parts) != 2 or not parts[1].isdigit():
                sys.exit(f"{path}:{number}: expected 'PATH[:FUNCTION] LINES', got {text!r}")
            if parts[0] in entries:
                sys.exit(f"{path}:{number}: {parts[0]} is listed twice")
            entries[parts[0]] = int(parts[1])
    return entries


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="*", help=f"folders under --root (default: {' '.join(DEFAULT_DIRS)})")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--allowlist", default="")
    p.add_argument("--max-file-lines", type=int, default=900)
    p.add_argument("--max-function-lines", type=int, default=150)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--functions", nargs="+", metavar="FILE",
                   help="print every function the scanner finds in FILE (name, lines, size) and exit")
    a = p.parse_args()

    if a.functions:
        for path in a.functions:
            with open(path, encoding="utf-8", errors="replace") as f:
                for name, first, last in functions(f.read()):
                    print(f"{name} {first}-{last} {last - first + 1}")
        return 0

    allow = read_allowlist(a.allowlist)
    dirs = a.dirs or [d for d in DEFAULT_DIRS if os.path.exists(os.path.join(a.root, d))]
    file_sizes, function_sizes = [], []
    for rel in sources(a.root, dirs):
        path = os.path.join(a.root, rel)
        file_sizes.append((line_count(path), rel))
        with open(path, encoding="utf-8", errors="replace") as f:
            for name, first, last in functions(f.read()):
                function_sizes.append((last - first + 1, f"{rel}:{name}", first))

    failures, allowed = [], []
    offenders = set()

    def judge(key, size, limit, what):
        offenders.add(key)
        listed = allow.get(key)
        if listed is None:
            failures.append(f"{key}: {size} lines, over the limit of {limit} for a {what}")
        elif size > listed:
            failures.append(f"{key}: {size} lines, grew past its allow-listed {listed} (limit {limit})")
        else:
            note = "" if size == listed else f" (listed at {listed}: lower the entry)"
            allowed.append(f"{key}: {size} lines, allow-listed{note}")

    for size, rel in file_sizes:
        if size > a.max_file_lines:
            judge(rel, size, a.max_file_lines, "file")
    # Functions of one name in one file (overloads) share an entry: each
    # must fit it.
    for size, key, _ in function_sizes:
        if size > a.max_function_lines:
            judge(key, size, a.max_function_lines, "function")
    for key in sorted(set(allow) - offenders):
        failures.append(f"{key}: allow-listed but no longer over its limit (or gone): remove the entry")

    scanned = ", ".join(d + "/" for d in dirs)
    print(f"sizes: {len(file_sizes)} files and {len(function_sizes)} functions in {scanned}; "
          f"limits {a.max_file_lines} lines per file, {a.max_function_lines} per function")
    print(f"largest files:")
    for size, rel in sorted(file_sizes, reverse=True)[:a.top]:
        print(f"  {size:6d} {rel}")
    print(f"largest functions:")
    for size, key, first in sorted(function_sizes, key=lambda x: (-x[0], x[1]))[:a.top]:
        print(f"  {size:6d} {key} (line {first})")
    if allowed:
        print(f"allow-listed offenders ({len(allowed)}; {a.allowlist}):")
        for line in allowed:
            print(f"  {line}")
    if failures:
        print(f"FAIL ({len(failures)}):")
        for line in failures:
            print(f"  {line}")
        return 1
    print("sizes: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
