"""The model card's YAML front matter, edited as text: only the `tags` list ever changes.

Round-tripping an owner's metadata through a YAML library rewrites it: PyYAML (YAML 1.1) turns
`language: [no]` (Norwegian) into `false` and `1.10` into `1.1`, drops every comment and reorders
quoting. The Hub reads cards as YAML 1.2. So we never re-serialise the owner's YAML: the front
matter is parsed (YAML 1.2, ruamel) only to *read* it, and the one edit we make — format tags
appended to `tags` — is spliced into the text. Every byte outside the `tags` block is kept; a
YAML 1.2 parse of every other key is equal before and after (checked on every edit: if it is not,
the front matter is left as written and a warning says why).

Handled as they come: a UTF-8 BOM, CRLF line ends, an empty `---\\n---` block (never a second
front matter in front of it), no front matter at all, `tags` as a block list (items appended in
its own indentation), a flow list or a single string (one tag; the block rewritten as a list), and
any other `tags` (a number, a mapping) left alone with a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

BOM = "\ufeff"
# The opening line, the YAML (possibly empty), and the closing line (the last line of the card may lack its newline).
_BLOCK = re.compile(r"\A---[ \t]*(\r?\n)(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_TAGS_KEY = re.compile(r"""^(?:tags|"tags"|'tags')[ \t]*:(?=[ \t]|\r?\n|$)""")
_ITEM = re.compile(r"^([ \t]*)-([ \t]+)")
# A tag written without quotes where it is a string in YAML 1.1 and 1.2 alike.
_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9._/+-]*$")
_AMBIGUOUS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}


class _Missing:
    pass


_MISSING = _Missing()


@dataclass(frozen=True)
class Card:
    """A README split as written: `bom + front + body == text`."""

    bom: str
    opening: str  # the `---` line, "" when the card has no front matter
    yaml: str | None  # the YAML up to the closing line, each line with its end (None: no front matter)
    closing: str  # the closing `---` line
    newline: str
    body: str

    @property
    def text(self) -> str:
        return self.bom + self.opening + (self.yaml or "") + self.closing + self.body


def split(text: str | None) -> Card:
    """The card as BOM, front matter and body, each exactly as written."""
    text = text or ""
    bom = BOM if text.startswith(BOM) else ""
    rest = text[len(bom) :]
    match = _BLOCK.match(rest)
    newline = "\r\n" if "\r\n" in (match.group(0) if match else rest[:4096]) else "\n"
    if not match:
        return Card(bom, "", None, "", newline, rest)
    yaml = match.group(2)
    return Card(bom, rest[: match.start(2)], yaml, rest[match.end(2) : match.end()], newline, rest[match.end() :])


def load_yaml(text: str) -> Any:
    """YAML 1.2, as the Hub reads a card (`no` is a string, `1.10` a number that stays 1.1 only
    once parsed). Raises ValueError on anything that is not valid YAML."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as e:
        raise ValueError(str(e)) from None


def metadata(text: str | None) -> dict | None:
    """The card's metadata: {} without front matter, None when it is not a YAML mapping."""
    card = split(text)
    if card.yaml is None:
        return {}
    try:
        data = load_yaml(card.yaml)
    except ValueError:
        return None
    if data is None:
        return {}
    return data if isinstance(data, dict) else None


def add_tags(text: str | None, tags: list[str]) -> tuple[str, tuple[str, ...]]:
    """`text` with `tags` appended to its metadata's `tags` (those it lacks), and warnings.

    Only the `tags` block changes; the front matter is left exactly as written where that cannot
    be done safely (unreadable YAML, `tags` of another type, a key we cannot find as a line).
    """
    card = split(text)
    nl = card.newline
    if card.yaml is None:
        return card.bom + f"---{nl}" + _tags_block(tags, nl) + f"---{nl}" + card.body, ()
    try:
        data = load_yaml(card.yaml)
    except ValueError:
        return card.text, ("The card's metadata is not valid YAML: left as written, without format tags.",)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return card.text, ("The card's metadata is not a YAML mapping: left as written, without format tags.",)
    current = data.get("tags", _MISSING)
    if isinstance(current, list):
        existing = current
    elif isinstance(current, str):
        existing = [current]  # `tags: text-classification` is one tag
    elif current is None or current is _MISSING:
        existing = []
    else:
        return card.text, (
            f"The card's `tags` is a {type(current).__name__}, not a list: left as written, without format tags.",
        )
    names = {str(t) for t in existing}
    new = [t for t in dict.fromkeys(tags) if t not in names]
    if not new:
        return card.text, ()
    edited = _splice(card.yaml, nl, current, existing, new)
    if edited is None or not _only_tags_changed(data, edited, [*existing, *new]):
        return card.text, ("The card's `tags` could not be edited on its own: left as written, without format tags.",)
    return card.bom + card.opening + edited + card.closing + card.body, ()


def _splice(yaml_text: str, nl: str, current: Any, existing: list, new: list[str]) -> str | None:
    """The YAML text with the new tags in its `tags` block (or a block added at its end)."""
    lines = yaml_text.splitlines(keepends=True)
    if current is _MISSING:  # the YAML ends with a line end (its closing `---` starts a line)
        return yaml_text + _tags_block(new, nl)
    starts = [i for i, line in enumerate(lines) if _TAGS_KEY.match(line)]
    if len(starts) != 1:
        return None
    start = starts[0]
    end = start  # the last line of the tags value
    inline = _strip_comment(lines[start].split(":", 1)[1]).strip()
    for i in range(start + 1, len(lines)):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # blank and comment lines belong to the block only if value lines follow
        if line[0] in " \t" or (not inline and line.startswith("-")):
            end = i
            continue
        break
    block_items = (
        isinstance(current, list) and not inline and any(_ITEM.match(lines[i]) for i in range(start + 1, end + 1))
    )
    if block_items:
        first = next(m for i in range(start + 1, end + 1) if (m := _ITEM.match(lines[i])))
        indent, gap = first.group(1), first.group(2)
        added = "".join(f"{indent}-{gap}{scalar(t)}{nl}" for t in new)
        return "".join(lines[: end + 1]) + added + "".join(lines[end + 1 :])
    # A flow list, a single string or an empty value: the block becomes a list of every tag.
    return "".join(lines[:start]) + _tags_block([*existing, *new], nl) + "".join(lines[end + 1 :])


def _tags_block(tags: list, nl: str) -> str:
    """A `tags` key written as a block list, the way we add one."""
    return f"tags:{nl}" + "".join(f"- {scalar(t)}{nl}" for t in tags)


def _strip_comment(value: str) -> str:
    """A line's value without a trailing `# comment` (a `#` after a space, outside quotes)."""
    quote = None
    for i, char in enumerate(value):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or value[i - 1] in " \t"):
            return value[:i]
    return value


# What a double-quoted YAML scalar holds unescaped and reads back unchanged: tab, printable ASCII and
# the rest of Unicode but the C1 controls (NEL, like U+2028/U+2029, is folded as a line break),
# surrogates and U+FFFE/U+FFFF (not "printable" to YAML at all). A source's
# `license_name` holding U+0092 (cp1252's apostrophe, mis-decoded) or DEL broke a derived card's
# front matter when written raw (issue 56, row 13).
_NOT_PRINTABLE = re.compile("[^\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def scalar(value: Any) -> str:
    """A string as YAML that reads back as the same string in YAML 1.1 and 1.2 (a tag, a repo id,
    a source's license name): plain where that is unambiguous, else double-quoted with every code
    point YAML forbids escaped."""
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _AMBIGUOUS:
        return text
    quoted = json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar...
    return _NOT_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)  # ...once YAML may hold it


def _only_tags_changed(before: dict, edited: str, tags: list) -> bool:
    try:
        after = load_yaml(edited)
    except ValueError:
        return False
    if not isinstance(after, dict):
        return False
    rest = {k: v for k, v in after.items() if k != "tags"}
    return rest == {k: v for k, v in before.items() if k != "tags"} and [str(t) for t in after.get("tags") or []] == [
        str(t) for t in tags
    ]
