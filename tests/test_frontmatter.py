"""The card's front matter edited as text (hfexport/card/frontmatter.py), over cards shaped like real ones.

For every card: outside the `tags` block the bytes are identical, a YAML 1.2 parse of every other
key is equal before and after, and `tags` holds the owner's tags then ours. No export, no Hub.
"""

from __future__ import annotations

import itertools
import re

import pytest

from hfexport.card.frontmatter import BOM, add_tags, load_yaml, metadata, split

OURS = ["onnx", "torch-export", "hfexport"]

# Metadata as owners write it: comments, quoting, YAML 1.1 traps (`no`, `on`, `1.10`, dates, octal).
OWNER_KEYS = [
    "license: apache-2.0\n",
    "# Model card metadata, see the docs\nlicense: mit # permissive\nlanguage:\n- en\n- 'no'\n",
    "language: [no, nb, nn]\nlicense: cc-by-4.0\n",
    "version: 1.10\nrelease: 2024-01-01\nmode: 0755\n",
    "on: yes\noff: No\nenabled: ON\n",
    'base_model: "google-bert/bert-base-uncased"\nbase_model_relation: finetune\n',
    "datasets:\n  - squad\n  - 'glue'\nmetrics:\n  - name: f1\n    value: 0.91\n",
    "model-index:\n- name: tiny\n  results:\n  - task:\n      type: text-classification\n    metrics:\n    - type: "
    "accuracy\n      value: 0.5\n",
    'widget:\n- text: "Hello: world # not a comment"\n  example_title: greeting\n',
    "description: >\n  A folded\n  description.\nnotes: |\n  Literal\n    block\n",
    "pipeline_tag: text-classification\nlibrary_name: transformers\ninference: false\n",
    "anchors: &a {x: 1}\nuses: *a\nempty:\nnull_value: ~\n",
    "",
]

# How `tags` is written (None: no tags key). {rest} is where the owner's other keys go.
TAG_STYLES = {
    "missing": None,
    "block": "tags:\n- text-classification\n- custom\n",
    "indented": "tags:\n  - text-classification  # the task\n  - 'quoted tag'\n",
    "commented": "tags: # formats and tasks\n# one per line\n- a\n\n- b\n",
    "flow": 'tags: [text-classification, "two words", no]\n',
    "flow-multiline": "tags: [alpha,\n  beta]\n",
    "string": "tags: text-classification\n",
    "empty": "tags:\n",
    "null": "tags: ~\n",
    "empty-flow": "tags: []\n",
    "already": "tags:\n- onnx\n- hfexport\n",
}


def _card(keys: str, style: str, crlf: bool, bom: bool, tags_first: bool) -> str:
    tags = TAG_STYLES[style] or ""
    yaml = tags + keys if tags_first else keys + tags
    text = "---\n" + yaml + "---\n\n# A model\n\nThe owner's text: `tags: keep` and --- inside.\n"
    if crlf:
        text = text.replace("\n", "\r\n")
    return (BOM if bom else "") + text


def _cases():
    styles = list(TAG_STYLES)
    for i, (keys, style) in enumerate(itertools.product(range(len(OWNER_KEYS)), styles)):
        if i % 2 and style not in ("missing", "string", "flow"):
            continue  # every style with every shape of keys would be 143 cards: keep a spread of them
        yield pytest.param(OWNER_KEYS[keys], style, i % 5 == 0, i % 7 == 0, i % 3 == 0, id=f"keys{keys}-{style}-{i}")


CASES = list(_cases())


def _tags_block(yaml: str) -> tuple[int, int] | None:
    """(first line, last line + 1) of the tags key and its value lines, or None."""
    lines = yaml.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if re.match(r"tags\s*:", line)]
    if not starts:
        return None
    end = starts[0] + 1
    for j in range(starts[0] + 1, len(lines)):
        if not lines[j].strip() or lines[j].lstrip().startswith("#"):
            continue
        if lines[j][0] in " \t-":
            end = j + 1
            continue
        break
    return starts[0], end


def _without_tags(yaml: str) -> str:
    lines = yaml.splitlines(keepends=True)
    span = _tags_block(yaml)
    return "".join(lines if span is None else lines[: span[0]] + lines[span[1] :])


def test_there_are_at_least_fifty_cards():
    assert len(CASES) >= 50


@pytest.mark.parametrize("keys,style,crlf,bom,tags_first", CASES)
def test_only_the_tags_block_changes_and_every_other_key_reads_the_same(keys, style, crlf, bom, tags_first):
    before = _card(keys, style, crlf, bom, tags_first)
    after, warnings = add_tags(before, OURS)
    assert warnings == ()
    a, b = split(before), split(after)
    assert b.bom == a.bom and b.body == a.body and b.opening == a.opening and b.closing == a.closing
    assert _without_tags(b.yaml) == _without_tags(a.yaml)  # byte for byte outside the tags block
    old, new = load_yaml(a.yaml) or {}, load_yaml(b.yaml)
    assert {k: v for k, v in new.items() if k != "tags"} == {k: v for k, v in old.items() if k != "tags"}
    owner_tags = old.get("tags")
    owner_tags = [owner_tags] if isinstance(owner_tags, str) else list(owner_tags or [])
    assert new["tags"] == owner_tags + [t for t in OURS if t not in owner_tags]
    if crlf:
        assert "\n" not in after.replace("\r\n", "")  # no bare line end slipped in
    again, _ = add_tags(after, OURS)
    assert again == after  # a second render adds nothing


@pytest.mark.parametrize("tags", ["tags: 5\n", "tags:\n  key: value\n", "tags: true\n"])
def test_tags_of_another_type_are_left_alone_with_a_warning(tags):
    before = "---\nlicense: mit\n" + tags + "---\nBody\n"
    after, warnings = add_tags(before, OURS)
    assert after == before and len(warnings) == 1 and "not a list" in warnings[0]


@pytest.mark.parametrize("text", [None, "", "Just a body\n", BOM + "Body after a BOM\n", "Body\r\nwith CRLF\r\n"])
def test_a_card_without_front_matter_gets_one_block_in_front_of_its_text(text):
    after, warnings = add_tags(text, OURS)
    card = split(after)
    assert warnings == () and card.yaml is not None and load_yaml(card.yaml) == {"tags": OURS}
    original = split(text)
    assert card.bom == original.bom and card.body == original.body
    assert after.count("---") == 2


@pytest.mark.parametrize("empty", ["---\n---\n", "---\n---", "---\r\n---\r\nBody\r\n", BOM + "---\n---\nBody\n"])
def test_an_empty_front_matter_is_filled_not_doubled(empty):
    after, warnings = add_tags(empty, OURS)
    card = split(after)
    assert warnings == () and load_yaml(card.yaml) == {"tags": OURS}
    assert after.count("---") == 2 and card.body == split(empty).body


def test_unreadable_or_non_mapping_front_matter_is_left_as_written():
    for text in ("---\nlicense: [unclosed\n---\nBody\n", "---\n- a list\n---\nBody\n"):
        after, warnings = add_tags(text, OURS)
        assert after == text and len(warnings) == 1
        assert metadata(text) is None
