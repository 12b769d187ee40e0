"""YAML from people and from clusters, loaded with bounds.

PyYAML's safe loader shares the object an alias points at, so a 478-byte "billion
laughs" file loads at once and then hangs whatever walks it (a deep copy, a linter).
Here each document's node graph is measured with aliases expanded, before any Python
object is built, and a document over `max_nodes` is refused with one line. Deep
nesting and bytes that are not UTF-8 are one line too.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from harness.errors import RollcheckError

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, when built
MAX_NODES = 200_000  # a config or a manifest has hundreds


class YamlInputError(RollcheckError, ValueError):
    """YAML that cannot be loaded safely: the message names the file and the line."""


def expanded_size(node: yaml.Node, limit: int) -> int:
    """Nodes in the document with every alias expanded, counted without expanding (each
    shared node's size is computed once); stops counting past limit."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being counted
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in sizes:
            continue
        children = _children(n)
        if not done and children:
            if any(id(c) in open_ for c in children):
                return limit + 1  # an alias to its own ancestor: endless once expanded
            open_.add(id(n))
            stack.append((n, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        open_.discard(id(n))
        total = 1 + sum(sizes.get(id(c), 0) for c in children)
        sizes[id(n)] = min(total, limit + 1)
    return sizes[id(node)]


def _children(n: yaml.Node) -> list[yaml.Node]:
    if isinstance(n, yaml.SequenceNode):
        return list(n.value)
    if isinstance(n, yaml.MappingNode):
        return [x for pair in n.value for x in pair]
    return []


def load_documents(
    text: str | bytes, where: str, max_nodes: int = MAX_NODES, numbered: bool = False
) -> Iterator[tuple[int, object]]:
    """(first line, value) of each document of a YAML stream, after its expanded size is
    checked; an empty document is passed over. numbered: errors name the document."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlInputError(
                f"{where}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
            ) from None
    loader = Loader(text)
    n = 0  # documents read (numbered: errors name the document, as in a manifest stream)
    try:
        while True:
            n += 1
            if not loader.check_node():
                break
            node = loader.get_node()
            if node is None:
                continue
            size = expanded_size(node, max_nodes)
            if size > max_nodes:
                doc = f": document {n}" if numbered else ""
                raise YamlInputError(
                    f"{where}{doc} line {node.start_mark.line + 1}: over {max_nodes} values once "
                    "its aliases are expanded (an alias bomb?); write the values out"
                )
            yield node.start_mark.line + 1, loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        doc = f": document {max(n, 1)}" if numbered else ""
        raise YamlInputError(
            f"{where}{doc}{line}: invalid YAML ({getattr(exc, 'problem', None) or exc})"
        ) from None
    except RecursionError:
        raise YamlInputError(f"{where}: nested too deeply to read") from None
    finally:
        loader.dispose()


def load_one(text: str | bytes, where: str, max_nodes: int = MAX_NODES) -> object:
    """A single-document YAML file (a config): None when it is empty."""
    docs = load_documents(text, where, max_nodes)
    first = next(docs, None)
    if next(docs, None) is not None:
        raise YamlInputError(f"{where}: holds more than one YAML document; give one")
    return None if first is None else first[1]
